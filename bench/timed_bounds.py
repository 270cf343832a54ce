"""The figures the suite once bounded with timed asserts (a bound under test raced the machine's load;
the tests keep the behaviour, this prints how long it takes):

- a local run's engine SIGKILLed: until ``status`` reports it dead (tests/test_runs.py, once < 2 s);
- an SSH host whose name does not resolve: until the refusal (tests/test_hosts_ssh.py, once < 2 s,
  "no backoff for what retrying cannot fix").

    .venv/bin/python bench/timed_bounds.py [--rounds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from servelab.engines.hosts.base import HostUnreachable  # noqa: E402
from servelab.engines.hosts.ssh import SshHost  # noqa: E402
from servelab.engines.hosts.hostsfile import HostConfig  # noqa: E402
from tests.fixtures.runlab import make_lab  # noqa: E402

#: What the tests bounded, in seconds.
FORMER_BOUND_S = 2.0


def line(what: str, seconds: list[float]) -> str:
    worst = max(seconds)
    return (f"{what}: median {statistics.median(seconds) * 1000:.0f} ms, max {worst * 1000:.0f} ms over {len(seconds)} rounds "
            f"(the old test bound {FORMER_BOUND_S:g} s: {'within' if worst < FORMER_BOUND_S else 'EXCEEDED'}), load {os.getloadavg()[0]:.2f}")


async def exit_noticed(root: Path, rounds: int) -> list[float]:
    root.mkdir()
    lab = make_lab(root, None)
    lab.experiment("forever")
    runs = lab.runs()
    out = []
    for _ in range(rounds):
        rec = await runs.launch("forever", skip_preflight=True)
        assert rec.pid is not None
        os.kill(rec.pid, signal.SIGKILL)
        t0 = time.perf_counter()
        while (await runs.status(rec.id, analyze=False)).alive:
            pass
        out.append(time.perf_counter() - t0)
    return out


async def unresolvable_refused(rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        host = SshHost(HostConfig(name="t", ssh="no-such-host.invalid", python=sys.executable, workdir="/tmp", connect_timeout=5.0))
        t0 = time.perf_counter()
        try:
            await host.run(["true"])
        except HostUnreachable:
            pass
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="servelab-bench-"))
    print(line("SIGKILL to status not alive (local run)", asyncio.run(exit_noticed(root / "lab", args.rounds))))
    print(line("unresolvable SSH name refused", asyncio.run(unresolvable_refused(args.rounds))))


if __name__ == "__main__":
    main()
