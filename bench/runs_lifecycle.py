"""Figures for the run lifecycle: launch, status and stop latency, follow throughput and memory.

Runs the StubEngine (tests/stub_engine) on this machine's local host and through a real OpenSSH
server on 127.0.0.1 started for the occasion (the test suite's fixture). Prints one line per figure.

    .venv/bin/python bench/runs_lifecycle.py [--log-mb 64]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from servelab.engines.hosts.registry import close_all  # noqa: E402
from tests.fixtures.runlab import make_lab  # noqa: E402
from tests.fixtures.sshd import start_sshd  # noqa: E402


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def measure(host: str, lab_root: Path, alias: str | None, log_mb: int) -> None:
    lab_root.mkdir()
    lab = make_lab(lab_root, alias)
    lab.experiment("bench", host=host, env={"STUB_CHILDREN": "2", "STUB_INTERVAL": "0.05"})
    lab.experiment("big", host=host, env={"STUB_LINES": "1"})
    runs = lab.runs()
    t0 = time.perf_counter()
    rec = await runs.launch("bench", skip_preflight=True)
    launch = time.perf_counter() - t0
    times = []
    for _ in range(10):
        t0 = time.perf_counter()
        await runs.status(rec.id, analyze=False)
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    listed = await runs.list(host)
    list_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    await runs.stop(rec.id, grace=5)
    stop = time.perf_counter() - t0
    print(f"{host:>5}: launch {launch * 1000:.0f} ms, status (no analysis) median {statistics.median(times) * 1000:.1f} ms, "
          f"list of {len(listed)} {list_s * 1000:.0f} ms, stop of a 3-process group {stop * 1000:.0f} ms")

    big = await runs.launch("big", skip_preflight=True)
    async for _ in runs.follow(big.id):
        pass
    line = b"(APIServer pid=1) INFO 01-01 00:00:00 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s\n"
    with open(big.log_path, "ab") as f:
        block = line * (1024 * 1024 // len(line))
        for _ in range(log_mb):
            f.write(block)
    size = os.path.getsize(big.log_path)
    before = rss_mb()
    t0 = time.perf_counter()
    got = 0
    async for _, chunk in runs.follow(big.id):
        got += len(chunk)
    took = time.perf_counter() - t0
    print(f"{host:>5}: follow {got / 1e6:.0f} MB in {took:.2f} s = {got / 1e6 / took:.0f} MB/s "
          f"(max RSS {before:.0f} -> {rss_mb():.0f} MB), all bytes: {got == size}")
    await close_all()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--log-mb", type=int, default=64)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="servelab-bench-"))
    server = start_sshd(root / "sshd")
    os.environ["SERVELAB_SSH_CONFIG"] = str(server.ssh_config)
    try:
        asyncio.run(measure("local", root / "local", None, args.log_mb))
        asyncio.run(measure("box", root / "ssh", server.alias, args.log_mb))
    finally:
        server.process.terminate()
        server.process.wait()


if __name__ == "__main__":
    main()
