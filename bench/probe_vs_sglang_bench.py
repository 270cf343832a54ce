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

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _bench_client import Comparison, arguments, compare, rows_of, within_10  # noqa: E402

from servelab.engines.catalog.folder import load_catalog  # noqa: E402
from servelab.engines.probe.stats import median  # noqa: E402
from tests.fixtures.engine import stop_group  # noqa: E402

SGLANG_PYTHON = REPO / ".venv-sglang" / "bin" / "python"
TINY_MODEL = REPO / ".models" / "tiny-llama"
EXPERIMENT = "tiny-cpu-sglang-baseline"


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
    stop_group(proc, grace=30)


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


def main() -> int:
    args = arguments(__doc__, "an already running SGLang (default: start tiny-cpu-sglang-baseline's server)", rounds=2).parse_args()
    probe_tps, bench_tps = compare(args, Comparison(
        engine="sglang", experiment=EXPERIMENT, bench_title="sglang.bench_serving",
        rows=rows_of("median_ttft_ms", "median_tpot_ms", "mean_tpot_ms", "output_throughput", "total_output_tokens"),
        load_note="other work skews these", placeholder="- -", widths=(22, 16, 22),
        start=start_tiny, stop=stop,
        bench=lambda url, dataset, n, max_tokens, work, rnd: run_bench(url, dataset, n, max_tokens, work / f"bench-{rnd}.jsonl"),
        starting=lambda port: f"starting {EXPERIMENT}'s server on 127.0.0.1:{port} ...", ready="ready",
    ), prefix="probe-vs-sglang-bench-")
    if probe_tps:
        mp, mb = median(probe_tps), median(bench_tps)
        print(f"\nmedian output tok/s over {len(probe_tps)} rounds: probe {mp:.1f}, bench_serving {mb:.1f}, ratio {mp / mb:.3f} {within_10(mp, mb)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
