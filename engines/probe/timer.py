"""Who sends the timed requests: a standard-library client on the server's own host.

The timed repeats never run in servelab's event loop. A dashboard redraw, log following or an SSH
tunnel's own traffic in that loop would hold a chunk back and move time from TPOT into TTFT, and
an SSH forward coalesces chunks. ``engines/helpers/timed_client.py`` runs instead, as a separate
process with the host's Python (like ``vllm bench serve`` run on the host), one blocking socket
per request, and brings back each ``data:`` line with the kernel's receive time; the figures are
then made here by :func:`engines.probe.client.result_from_events`, the same rule for every route.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Protocol

from servelab.engines.errors import ServelabError
from servelab.engines.helpers import HelperError, run_helper
from servelab.engines.hosts.base import Host
from servelab.engines.hosts.hostsfile import HostConfig

HELPER = "timed_client.py"


@dataclass(frozen=True)
class TimedRecord:
    """One request as the timer saw it (times in ms from when the request was about to be sent)."""

    start_s: float
    error: str | None
    events: list[tuple[float, float | None, str]] = field(default_factory=list)
    kernel_stamps: bool = False
    #: How long the client sat runnable without a CPU during this request (None: the host does not say).
    cpu_wait_ms: float | None = None


@dataclass(frozen=True)
class TimedBatch:
    """A repeat's requests and how long the whole batch took on the timer's clock."""

    duration_s: float
    records: list[TimedRecord]
    #: The scheduling the client got on its host, in words (``real-time priority (SCHED_FIFO 1)``).
    priority: str = ""
    #: The host's conditions just before and after the batch (``timed_client.host_sample``), as sent.
    host: dict[str, Any] = field(default_factory=dict)


class RequestTimer(Protocol):
    """Sends a batch of chat bodies and times each stream."""

    #: Where the requests come from, for ``probe.json`` (e.g. ``timed client on host gpubox``).
    where: str

    async def time_batch(self, bodies: list[dict[str, Any]], concurrency: int, timeout_s: float) -> TimedBatch: ...


class HostTimer:
    """Runs ``timed_client.py`` on ``host`` with ``python`` against the server at ``url`` as seen there.

    The client asks for real-time priority (``realtime``) so it never queues for a CPU behind a
    busy-waiting engine on the same host, and can be pinned to ``cpus``; ``realtime=False`` is the
    plain client, for comparison (bench/probe_vs_server.py).
    """

    def __init__(self, host: Host, python: str, url: str, *, realtime: bool = True, cpus: list[int] | None = None,
                 watch_sid: int | None = None) -> None:
        self.host = host
        self.watch_sid = watch_sid
        self.python = python
        self.url = url
        self.realtime = realtime
        self.cpus = cpus
        self.where = f"timed client on host {host.name} ({url})"

    async def time_batch(self, bodies: list[dict[str, Any]], concurrency: int, timeout_s: float) -> TimedBatch:
        request = {
            "url": self.url, "path": "/v1/chat/completions", "bodies": bodies, "concurrency": concurrency,
            "timeout": timeout_s, "realtime": self.realtime, "cpus": self.cpus, "watch_sid": self.watch_sid,
        }
        budget = timeout_s * max(1, -(-len(bodies) // max(1, concurrency))) + 60.0
        try:
            answer = await run_helper(self.host, self.python, HELPER, request=request, timeout=budget)
        except HelperError as exc:
            raise ServelabError(f"timed requests failed: {exc}") from None
        return parse_answer(answer, len(bodies), self.host.name)


def local_timer(url: str, python: str | None = None, *, realtime: bool = True, cpus: list[int] | None = None) -> HostTimer:
    """The timer for a server reached directly from this machine (``run_probe`` given only a URL)."""
    from servelab.engines.hosts.local import LocalHost

    return HostTimer(LocalHost(HostConfig()), python or sys.executable, url, realtime=realtime, cpus=cpus)


def parse_answer(answer: dict[str, Any], expected: int, host: str) -> TimedBatch:
    """The helper's JSON answer as typed records; a malformed answer is one clear line."""
    if answer.get("error"):
        raise ServelabError(f"timed client on {host}: {answer['error']}")
    raw = answer.get("records")
    if not isinstance(raw, list) or len(raw) != expected:
        raise ServelabError(f"timed client on {host} answered {len(raw) if isinstance(raw, list) else 'no'} records for {expected} requests")
    records: list[TimedRecord] = []
    for r in raw:
        if not isinstance(r, dict):
            raise ServelabError(f"timed client on {host} answered a record that is not an object")
        events = [(float(e[0]), None if e[1] is None else float(e[1]), str(e[2])) for e in r.get("events") or []]
        wait = r.get("cpu_wait_ms")
        records.append(TimedRecord(float(r.get("start_s") or 0.0), r.get("error"), events, bool(r.get("kernel_stamps")),
                                   float(wait) if isinstance(wait, (int, float)) else None))
    host_samples = answer.get("host")
    return TimedBatch(float(answer.get("duration_s") or 0.0), records, str(answer.get("priority") or ""),
                      host_samples if isinstance(host_samples, dict) else {})
