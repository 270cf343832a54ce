"""The host-side timed client against a real local HTTP server, and the timing rule on its events."""

from __future__ import annotations

import os
import sys
from dataclasses import replace

import pytest

from servelab.engines.errors import ServelabError
from servelab.engines.probe.client import result_from_events
from servelab.engines.adapters.exchange import Prompt
from servelab.engines.probe import prompts
from servelab.engines.catalog.experiment import ProbeSettings
from servelab.engines.probe.runner import CPU_WAIT_NOTE_MS, run_probe
from servelab.engines.probe.timer import TimedBatch, local_timer, parse_answer
from tests.fixtures.ports import free_port
from tests.fixtures.slowstream import GAP_S, slow_server  # noqa: F401 (a fixture)
from tests.fixtures.fake_sglang import FakeSglangServer

PROMPT = Prompt("p", "math", ({"role": "user", "content": "hi"},))


async def test_timed_client_stamps_each_message_with_the_kernel_clock(slow_server: str) -> None:
    batch = await local_timer(slow_server, sys.executable).time_batch([{"model": "m"}, {"model": "m"}], 2, 10)
    assert len(batch.records) == 2 and batch.duration_s >= 3 * GAP_S
    rec = batch.records[0]
    assert rec.error is None and rec.kernel_stamps
    assert len(rec.events) == 8  # role, a, "", b, c, finish, usage, [DONE]
    assert all(k is not None and 0 <= k <= u + 1 for u, k, _ in rec.events)
    res = result_from_events(PROMPT, rec.events, start=rec.start_s)
    assert res.ok and res.output_tokens == 5
    assert res.content_chunks == 5  # the role-only opening message is not a step; the empty delta is
    assert res.ttft_ms is not None and res.ttft_ms < GAP_S * 1000
    assert res.tpot_ms == pytest.approx(3 * GAP_S * 1000 / 4, rel=0.5)


async def test_failures_are_recorded_per_request_not_raised() -> None:
    batch = await local_timer(f"http://127.0.0.1:{free_port()}", sys.executable).time_batch([{}], 1, 5)
    assert batch.records[0].error and "cannot connect" in batch.records[0].error
    assert not result_from_events(PROMPT, batch.records[0].events, error=batch.records[0].error).ok
    batch = await local_timer("http://127.0.0.1:99999", sys.executable).time_batch([{}, {}], 2, 5)
    assert all(r.error and "port out of range" in r.error.lower() for r in batch.records)


def test_a_malformed_helper_answer_is_one_line() -> None:
    with pytest.raises(ServelabError, match="answered 1 records for 2 requests"):
        parse_answer({"records": [{}]}, 2, "box")
    with pytest.raises(ServelabError, match="bad request"):
        parse_answer({"error": "bad request on stdin"}, 1, "box")


async def test_the_client_asks_for_real_time_priority_and_reports_its_cpu_wait(slow_server: str) -> None:
    """The fix of issue 15: the timed client does not queue for a CPU behind a busy engine."""
    cpu = min(os.sched_getaffinity(0))
    batch = await local_timer(slow_server, sys.executable, cpus=[cpu]).time_batch([{"model": "m"}], 1, 10)
    if os.geteuid() == 0:
        assert batch.priority == f"real-time priority (SCHED_FIFO 1), on CPUs {cpu}"
    else:  # a user without CAP_SYS_NICE: said so, and the request is still timed
        assert batch.priority.startswith("normal priority (real-time refused: ") and batch.priority.endswith(f"on CPUs {cpu}")
    rec = batch.records[0]
    assert rec.error is None and rec.cpu_wait_ms is not None and 0.0 <= rec.cpu_wait_ms < 3 * GAP_S * 1000
    plain = await local_timer(slow_server, sys.executable, realtime=False).time_batch([{"model": "m"}], 1, 10)
    assert plain.priority == "normal priority" and plain.records[0].error is None


class FakeStarvedTimer:
    """The real local timer, with each record's CPU wait replaced (a starved client cannot be made on demand)."""

    def __init__(self, url: str, wait_ms: float) -> None:
        self.inner = local_timer(url, sys.executable)
        self.where = self.inner.where
        self.wait_ms = wait_ms

    async def time_batch(self, bodies: list[dict[str, object]], concurrency: int, timeout_s: float) -> TimedBatch:
        batch = await self.inner.time_batch(bodies, concurrency, timeout_s)
        return replace(batch, records=[replace(r, cpu_wait_ms=self.wait_ms) for r in batch.records])


@pytest.mark.parametrize("wait_ms", [0.3, 40.0])
async def test_the_probe_says_when_its_client_waited_for_a_cpu(wait_ms: float) -> None:
    with FakeSglangServer("openai") as server:
        s = (await run_probe(server.url, prompts.builtin("mixed"), ProbeSettings(max_tokens=8, concurrency=1, repeats=1, warmup=0),
                             timer=FakeStarvedTimer(server.url, wait_ms))).summary
    assert s["client_mean_cpu_wait_ms"] == pytest.approx(wait_ms)
    assert ("real-time priority" in s["latency_source"]) == (os.geteuid() == 0)
    said = f"the client waited {wait_ms:.1f} ms a request for a CPU"
    assert (said in s["latency_source"]) == (wait_ms > CPU_WAIT_NOTE_MS), s["latency_source"]
