"""What the two bench-tool comparisons share (``probe_vs_vllm_bench.py``, ``probe_vs_sglang_bench.py``).

Each round runs the probe (1 warm-up, 1 repeat, concurrency 1) and then the engine's own bench
client on the same server and the same prompts (a ShareGPT-shaped file), and prints the two
side by side; at the end, the median output tok/s of both. A script names its engine, its
experiment, how to start its tiny server and how to run its bench client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servelab.engines.adapters.base import get_adapter
from servelab.engines.catalog.folder import load_catalog
from servelab.engines.probe import prompts as prompt_sets
from servelab.engines.catalog.experiment import ProbeSettings
from servelab.engines.probe.runner import run_probe
from servelab.engines.probe.stats import median
from tests.fixtures.ports import free_port

REPO = Path(__file__).resolve().parent.parent

#: (label, summary key, digits) of one table row.
Row = tuple[str, str, int]
#: Runs the engine's bench client: (url, ShareGPT file, prompts, max_tokens, work folder, round) -> its summary.
Bench = Callable[[str, Path, int, int, Path, int], dict[str, Any]]

#: Each figure a comparison may show: summary key -> (label, digits).
FIGURES: dict[str, tuple[str, int]] = {
    "spec_decode_acceptance_rate": ("acceptance rate (%)", 2),
    "spec_decode_acceptance_length": ("acceptance length", 3),
    "spec_decode_num_drafts": ("drafts", 0),
    "spec_decode_accepted_tokens": ("accepted tokens", 0),
    "spec_decode_per_position_acceptance_rates": ("per-position acceptance", 2),
    "output_throughput": ("output tok/s", 1),
    "total_output_tokens": ("total output tokens", 0),
    "median_ttft_ms": ("median TTFT (ms)", 2),
    "median_tpot_ms": ("median TPOT (ms)", 2),
    "mean_tpot_ms": ("mean TPOT (ms)", 2),
}


def rows_of(*keys: str) -> list[Row]:
    """The table rows of ``keys``, in that order, labelled and rounded as :data:`FIGURES` says."""
    return [(FIGURES[k][0], k, FIGURES[k][1]) for k in keys]


@dataclass(frozen=True)
class Comparison:
    engine: str  # the adapter's name
    experiment: str  # the catalog entry the probe reads its settings from
    bench_title: str  # the bench client's column head
    rows: Sequence[Row]
    load_note: str  # after "(load average N on M cores: "
    placeholder: str  # the ShareGPT file's second (answer) turn
    widths: tuple[int, int, int]  # label, probe and bench columns
    start: Callable[[int, Path], subprocess.Popen[bytes]]  # (port, log) -> the started server, ready
    stop: Callable[[subprocess.Popen[bytes]], None]
    bench: Bench
    starting: Callable[[int], str]  # the line printed before starting on a port
    ready: str  # the word printed once it is up ("ready", "healthy")


def arguments(doc: str | None, url_help: str, rounds: int) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    ap.add_argument("--url", help=url_help)
    ap.add_argument("--prompts", default="builtin:mixed")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=rounds)
    return ap


def row(label: str, a: Any, b: Any, digits: int = 2, widths: tuple[int, int, int] = (28, 24, 24)) -> str:
    def f(x: Any) -> str:
        if isinstance(x, list):
            return " ".join(f"{v:.2f}" for v in x)
        return "-" if x is None else f"{x:.{digits}f}"

    ratio = f"{a / b:.3f}" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else ""
    wl, wa, wb = widths
    return f"  {label:<{wl}} {f(a):>{wa}} {f(b):>{wb}} {ratio:>8}"


def within_10(mp: float, mb: float) -> str:
    return f"({'within' if abs(mp / mb - 1) <= 0.10 else 'NOT within'} 10 %)"


def compare(args: argparse.Namespace, c: Comparison, prefix: str) -> tuple[list[float], list[float]]:
    """Run ``args.rounds`` rounds on ``args.url`` (or a tiny server started here and stopped at the
    end); returns the rounds' output tok/s, the probe's and the bench client's."""
    ps = prompt_sets.load(args.prompts, base=REPO / "experiments")
    exp = load_catalog(REPO / "experiments").get(c.experiment).experiment
    work = Path(tempfile.mkdtemp(prefix=prefix))
    dataset = work / "prompts.json"  # ShareGPT shape: the first turn is the prompt, the second only a placeholder
    dataset.write_text(json.dumps([{"conversations": [{"from": "human", "value": p.text}, {"from": "gpt", "value": c.placeholder}]} for p in ps.prompts]))
    proc = None
    url = args.url
    if url is None:
        port = free_port()
        print(c.starting(port), flush=True)
        t0 = time.monotonic()
        proc = c.start(port, work / "engine.log")
        print(f"{c.ready} after {time.monotonic() - t0:.0f} s (load {os.getloadavg()[0]:.2f})", flush=True)
        url = f"http://127.0.0.1:{port}"
    probe_tps: list[float] = []
    bench_tps: list[float] = []
    try:
        for rnd in range(args.rounds):
            result = asyncio.run(
                run_probe(url, ps, ProbeSettings(max_tokens=args.max_tokens, concurrency=1, repeats=1, warmup=1),
                          adapter=get_adapter(c.engine), experiment=exp)
            )
            p = result.summary
            b = c.bench(url, dataset, len(ps), args.max_tokens, work, rnd)
            print(f"\nround {rnd + 1}: {len(ps)} prompts ({ps.name}), max_tokens {args.max_tokens}, concurrency 1, temperature 0")
            wl, wa, wb = c.widths
            print(f"  {'':<{wl}} {'servelab probe':>{wa}} {c.bench_title:>{wb}} {'ratio':>8}")
            for label, key, digits in c.rows:
                print(row(label, p.get(key), b.get(key), digits, c.widths))
            print(f"  (load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores: {c.load_note})")
            if p.get("output_throughput") and b.get("output_throughput"):
                probe_tps.append(p["output_throughput"])
                bench_tps.append(b["output_throughput"])
    finally:
        if proc is not None:
            c.stop(proc)
    return probe_tps, bench_tps
