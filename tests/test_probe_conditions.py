"""Each probe round's host conditions, and the gap in time and conditions between two probes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab.engines.probe.conditions import from_samples, gap
from servelab.engines.probe.summary import ProbeSummary
from servelab.engines.probe.timer import local_timer
from tests.fixtures.slowstream import slow_server  # noqa: F401 (a fixture)


def sample(t: float, load: float, total: int, busy: int, me: int, server: int | None) -> dict[str, object]:
    out: dict[str, object] = {"t": t, "cpus": 2, "load": [load, load, load], "total": total, "busy": busy, "self": me}
    if server is not None:
        out["server"] = server
    return out


def test_other_processes_cpu_is_what_the_server_and_client_did_not_use() -> None:
    # by hand: 200 jiffies over 2 CPUs, 150 busy, the client 10 and the server 40: others 100/200 x 2 = 1.0 core
    c = from_samples({"before": sample(0, 1.0, 1000, 500, 5, 100), "after": sample(1, 2.5, 1200, 650, 15, 140)})
    assert c.load1 == 2.5 and c.cpus == 2
    assert c.other_cores == pytest.approx(1.0) and c.server_cores == pytest.approx(0.4)
    assert from_samples(None).load1 is None and from_samples({"before": "x"}).other_cores is None


@given(st.integers(1, 10_000), st.integers(0, 10_000), st.integers(0, 10_000), st.integers(0, 10_000))
def test_other_cores_stay_within_the_machine(total: int, busy: int, me: int, server: int) -> None:
    busy = min(busy, total)
    c = from_samples({"before": sample(0, 0, 0, 0, 0, 0), "after": sample(1, 0, total, busy, me, server)})
    assert c.other_cores is not None and 0.0 <= c.other_cores <= 2.0


def probe_at(date: str, load: float, other: float, runnable: float | None = None) -> ProbeSummary:
    return ProbeSummary({"date": date, "host_conditions": [{"load1": load, "other_cores": other, "cpus": 2, "runnable": runnable}] * 3})


def test_a_gap_in_time_and_load_is_named() -> None:
    base, run = probe_at("20261206-012900", 0.5, 0.1), probe_at("20261206-014300", 2.1, 1.3)
    assert gap(base, run) == "probed 14 min apart; host load 0.5 against 2.1; other processes used 0.1 against 1.3 cores"
    assert gap(base, probe_at("20261206-013000", 0.6, 0.1)) == ""  # a minute apart, same conditions: nothing to say
    assert gap(base, probe_at("20261206-023000", 0.6, 0.1)) == "probed 61 min apart"
    # a saturated host: the load average and the others' CPU barely move, the queue of tasks does
    busy = probe_at("20261206-012900", 6.0, 1.5, 4.0), probe_at("20261206-013000", 6.3, 1.6, 6.2)
    assert gap(*busy) == "probed 60 s apart; 4.0 against 6.2 tasks wanting a CPU"
    old = ProbeSummary({"date": "20261206-023000"})  # a file made before conditions were kept
    assert gap(base, old) == "probed 61 min apart; no host conditions recorded for the run"


@pytest.fixture
def burner() -> Iterator[subprocess.Popen[bytes]]:
    """A real CPU burner in its own session (what another engineer's job looks like to the probe)."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


async def test_the_timed_client_counts_a_burner_as_another_process_unless_it_is_the_server(slow_server: str, burner: subprocess.Popen[bytes]) -> None:
    bodies = [{"model": "m"}] * 8  # ~0.8 s of streams: enough jiffies to see a core
    seen_as_other = from_samples((await local_timer(slow_server, sys.executable).time_batch(bodies, 1, 10)).host)
    assert seen_as_other.other_cores is not None and seen_as_other.other_cores > 0.3
    assert seen_as_other.runnable is not None and seen_as_other.runnable >= 1  # the burner wanted a CPU all along
    timer = local_timer(slow_server, sys.executable)
    timer.watch_sid = burner.pid
    seen_as_server = from_samples((await timer.time_batch(bodies, 1, 10)).host)
    assert seen_as_server.server_cores is not None and seen_as_server.server_cores > 0.3
    assert seen_as_server.load1 is not None
