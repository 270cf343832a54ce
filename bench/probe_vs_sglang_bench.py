"""The probe and SGLang's own ``bench_serving`` on the same SGLang server and the same prompts, side by side.

    flock /tmp/servelab-engine.lock .venv/bin/python bench/probe_vs_sglang_bench.py [--url URL] [--rounds 2]

Without ``--url`` it starts tiny-cpu-sglang-baseline's server (SGLang 0.5.23 on CPU from
``.venv-sglang``: ``SGLANG_USE_CPU_ENGINE=1 --device cpu --max-total-tokens 2048``, 127.0.0.1, a
free port) and stops its process group at the end. Each round runs the probe (1 warm-up, 1 repeat,
the chat route, streaming) and then ``python -m sglang.bench_serving`` with the ``sglang-oai-chat``
backend (the same route), the same prompts as a ShareGPT-shaped file, temperature 0, the same
max_tokens as a fixed output length, concurrency 1. It prints TTFT, TPOT and output tok/s from both.

No acceptance row: speculative decoding does not run on this CPU (SGLang's torch_native backend
fails the verify step; it needs AMX kernels), so both measure the plain server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from servelab.engines.adapter import get_adapter  # noqa: E402
from servelab.engines.catalog import load_catalog  # noqa: E402
from servelab.engines.probe import prompts as prompt_sets  # noqa: E402
from servelab.engines.experiment import ProbeSettings  # noqa: E402
from servelab.engines.probe.runner import run_probe  # noqa: E402
from servelab.engines.probe.stats import median  # noqa: E402

SGLANG_PYTHON = REPO / ".venv-sglang" / "bin" / "python"
TINY_MODEL = REPO / ".models" / "tiny-llama"
EXPERIMENT = "tiny-cpu-sglang-baseline"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_tiny(port: int, log: Path) -> subprocess.Popen[bytes]:
    """tiny-cpu-sglang-baseline's own argv and env (from its adapter), on a free port."""
    catalog = load_catalog(REPO / "experiments")
    exp = catalog.get(EXPERIMENT)
    spec = catalog.launch_spec(exp)
    argv = [a if a != str(exp.experiment.port) else str(port) for a in spec.argv]
    env = {**os.environ, **spec.env}
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"tiny SGLang exited with {proc.returncode}; see {log}")
        if b"The server is fired up and ready to roll" in log.read_bytes():
            return proc
        time.sleep(0.5)
    stop(proc)
    raise SystemExit(f"tiny SGLang not ready after 600 s; see {log}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop the process group this script started (SGLang's scheduler and detokenizer are in it)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_bench(url: str, dataset: Path, n: int, max_tokens: int, out: Path) -> dict[str, Any]:
    argv = [
        str(SGLANG_PYTHON), "-m", "sglang.bench_serving",
        "--backend", "sglang-oai-chat", "--base-url", url, "--model", "tiny-llama", "--tokenizer", str(TINY_MODEL),
        "--dataset-name", "sharegpt", "--dataset-path", str(dataset), "--sharegpt-output-len", str(max_tokens),
        "--num-prompts", str(n), "--max-concurrency", "1", "--temperature", "0", "--warmup-requests", "1",
        "--disable-tqdm", "--output-file", str(out),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, cwd="/")
    if done.returncode != 0 or not out.exists():
        raise SystemExit(f"sglang.bench_serving failed ({done.returncode}):\n{done.stderr[-3000:]}\n{done.stdout[-2000:]}")
    lines = [ln for ln in out.read_text().splitlines() if ln.strip()]
    return dict(json.loads(lines[-1]))


def row(label: str, a: Any, b: Any, digits: int = 2) -> str:
    def f(x: Any) -> str:
        return "-" if x is None else f"{x:.{digits}f}"

    ratio = f"{a / b:.3f}" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else ""
    return f"  {label:<22} {f(a):>16} {f(b):>22} {ratio:>8}"


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--url", help="an already running SGLang (default: start tiny-cpu-sglang-baseline's server)")
    ap.add_argument("--prompts", default="builtin:mixed")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()

    ps = prompt_sets.load(args.prompts, base=REPO / "experiments")
    exp = load_catalog(REPO / "experiments").get(EXPERIMENT).experiment
    work = Path(tempfile.mkdtemp(prefix="probe-vs-sglang-bench-"))
    dataset = work / "prompts.json"  # ShareGPT shape: the first turn is the prompt, the second only a placeholder
    dataset.write_text(json.dumps([{"conversations": [{"from": "human", "value": p.text}, {"from": "gpt", "value": "- -"}]} for p in ps.prompts]))
    proc = None
    url = args.url
    if url is None:
        port = free_port()
        print(f"starting {EXPERIMENT}'s server on 127.0.0.1:{port} ...", flush=True)
        t0 = time.monotonic()
        proc = start_tiny(port, work / "engine.log")
        print(f"ready after {time.monotonic() - t0:.0f} s (load {os.getloadavg()[0]:.2f})", flush=True)
        url = f"http://127.0.0.1:{port}"
    try:
        probe_tps: list[float] = []
        bench_tps: list[float] = []
        for rnd in range(args.rounds):
            result = asyncio.run(
                run_probe(url, ps, ProbeSettings(max_tokens=args.max_tokens, concurrency=1, repeats=1, warmup=1),
                          adapter=get_adapter("sglang"), experiment=exp)
            )
            p = result.summary
            b = run_bench(url, dataset, len(ps), args.max_tokens, work / f"bench-{rnd}.jsonl")
            print(f"\nround {rnd + 1}: {len(ps)} prompts ({ps.name}), max_tokens {args.max_tokens}, concurrency 1, temperature 0")
            print(f"  {'':<22} {'servelab probe':>16} {'sglang.bench_serving':>22} {'ratio':>8}")
            print(row("median TTFT (ms)", p.get("median_ttft_ms"), b.get("median_ttft_ms")))
            print(row("median TPOT (ms)", p.get("median_tpot_ms"), b.get("median_tpot_ms")))
            print(row("mean TPOT (ms)", p.get("mean_tpot_ms"), b.get("mean_tpot_ms")))
            print(row("output tok/s", p.get("output_throughput"), b.get("output_throughput"), 1))
            print(row("total output tokens", p.get("total_output_tokens"), b.get("total_output_tokens"), 0))
            print(f"  (load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores: other work skews these)")
            if p.get("output_throughput") and b.get("output_throughput"):
                probe_tps.append(p["output_throughput"])
                bench_tps.append(b["output_throughput"])
        if probe_tps:
            mp, mb = median(probe_tps), median(bench_tps)
            print(f"\nmedian output tok/s over {len(probe_tps)} rounds: probe {mp:.1f}, bench_serving {mb:.1f}, ratio {mp / mb:.3f} "
                  f"({'within' if abs(mp / mb - 1) <= 0.10 else 'NOT within'} 10 %)")
    finally:
        if proc is not None:
            stop(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
