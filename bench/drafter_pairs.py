"""Score ``servelab drafter`` on a batch of real drafter/target pairs (tests/data/drafters/pairs/batchN).

Each pair is written to a temporary folder (tests/fixtures/drafter_pairs.materialize) and checked by
the real command, ``servelab drafter ... --json``, in its own process, with the engine's interpreter
as the local host's python, so the rules come from the installed engine. A pair is right when the
error codes are exactly the expected ones and every expected warning is there. Prints one markdown
row per pair and the score; ``--timing`` also prints the seconds of each check.

    .venv/bin/python bench/drafter_pairs.py batch1 [--timing]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fixtures.drafter_pairs import Pair, batch, materialize  # noqa: E402

ENGINE_PYTHON = {"vllm": ROOT / ".venv-engine" / "bin" / "python", "sglang": ROOT / ".venv-sglang" / "bin" / "python"}


def _supports(flag: str) -> bool:
    out = subprocess.run([str(ROOT / ".venv" / "bin" / "servelab"), "drafter", "--help"], capture_output=True, text=True)
    return flag in out.stdout


def score(pair: Pair, work: Path, num_tokens_flag: bool) -> tuple[bool, set[str], set[str], float]:
    drafter, target = materialize(pair, work / pair.name)
    exp = work / "exp"
    exp.mkdir(exist_ok=True)
    (exp / "hosts.toml").write_text(f'[hosts.local]\npython = "{ENGINE_PYTHON[pair.engine]}"\nworkdir = "{work / "w"}"\n')
    argv = [str(ROOT / ".venv" / "bin" / "servelab"), "--dir", str(exp), "drafter", str(drafter), "--target", str(target),
            "--engine", pair.engine, "--method", pair.method, "--json"]
    if pair.max_model_len:
        argv += ["--max-model-len", str(pair.max_model_len)]
    if pair.num_tokens and num_tokens_flag:
        argv += ["--num-tokens", str(pair.num_tokens)]
    t0 = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    try:
        findings = json.loads(out.stdout)["findings"]
    except (json.JSONDecodeError, KeyError):
        return False, {f"no JSON: {out.stderr.strip()[:120]}"}, set(), seconds
    errors = {f["code"] for f in findings if f["severity"] == "error"}
    warnings = {f["code"] for f in findings if f["severity"] == "warning"}
    return errors == set(pair.errors) and set(pair.warnings) <= warnings, errors, warnings, seconds


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("batch")
    ap.add_argument("--timing", action="store_true")
    args = ap.parse_args()
    pairs = batch(args.batch)
    flag = _supports("--num-tokens")
    right = 0
    print("| pair | expected errors / warnings | servelab errors / warnings | right |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for p in pairs:
            ok, errors, warnings, seconds = score(p, Path(tmp), flag)
            right += ok
            exp = f"{', '.join(sorted(p.errors)) or 'none'} / {', '.join(sorted(p.warnings)) or '-'}"
            got = f"{', '.join(sorted(errors)) or 'none'} / {', '.join(sorted(warnings)) or '-'}"
            print(f"| {p.name} | {exp} | {got} | {'yes' if ok else 'NO'}{f' ({seconds:.2f} s)' if args.timing else ''} |")
    print(f"\nscore: {right}/{len(pairs)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
