"""Timed streamed requests sent from the host itself (standard library only), like ``vllm bench serve``.

servelab's probe sends its timed requests from here, on the host that runs the server, so the
figures do not depend on an SSH tunnel (which coalesces chunks) or on whatever else runs in
servelab's own event loop (a dashboard, log following). Nothing else runs in this process while a
request is timed: one blocking socket per request, one thread per concurrent slot.

It must not queue for a CPU behind the engine. A CPU engine busy-waits: vLLM's EngineCore spins
(``sched_yield``) on the core its OpenMP worker leaves free, and that yield does not reach a process
in another session (the kernel's autogroups share the CPU between sessions first), so on a small
host a plain client read its stream late, in bursts (issue 15: ~100 ms of CPU wait per request on
2 cores). So it asks for the lowest real-time priority (SCHED_FIFO 1) when the host allows it
(root or CAP_SYS_NICE); it sleeps in ``recv`` almost always and runs a few microseconds per chunk,
so it takes next to nothing from the engine. ``cpus`` pins it (e.g. to the cores the engine's
compute threads are kept off). The answer says what it got (``priority``).

stdin: ``{"url": "http://127.0.0.1:PORT", "path": "/v1/chat/completions", "bodies": [{...}, ...],
"concurrency": 1, "timeout": 300, "realtime": true, "cpus": null}``. stdout, last line:
``{"duration_s": ..., "priority": "...", "records": [...]}`` with one record per body, in order: ``start_s`` (from the batch start), ``status``, ``error``,
``events`` = ``[[user_ms, kernel_ms, text], ...]`` per SSE ``data:`` line, where ``user_ms`` is when
this script had the whole line and ``kernel_ms`` when the kernel received its last byte
(SO_TIMESTAMPNS; null where the kernel does not say). Both count from the moment the request was
about to be written. ``cpu_wait_ms`` is how long this request's thread sat runnable without a CPU
while the request was timed (``/proc/thread-self/schedstat``; null where the kernel does not say):
a client that waits for a CPU reads late, and the kernel merges the chunks that queue up meanwhile
into one read stamped with the latest arrival, so the figures are only as good as this is small.
servelab turns the events into figures (engines/probe/client.py) so both routes share one timing rule.

``host``: the host's conditions just before and just after the batch (``load`` average, the ``cpus``,
busy and total jiffies from ``/proc/stat``, and the CPU jiffies of this client and of the server's
session ``watch_sid``, the run's pid, when the request names one), so servelab can say what else used
the CPU during this round; ``runnable``: the mean count of runnable tasks on the host while the batch
ran (``procs_running``, sampled every 0.1 s, the sampler itself left out).
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import threading
import time
from typing import Any
from urllib.parse import urlsplit

if sys.path and sys.path[0] in ("", "."):
    del sys.path[0]  # `python -c` puts the working folder first: never import from it

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux value; absent on some builds
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
RECV_SIZE = 65536


class _Reader:
    """Bytes from a socket with the kernel's receive time of the latest read."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.kernel_stamps = True
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        except OSError:
            self.kernel_stamps = False
        self.last_kernel: float | None = None

    def recv(self) -> bytes:
        if not self.kernel_stamps:
            self.last_kernel = None
            return self.sock.recv(RECV_SIZE)
        data, anc, _flags, _addr = self.sock.recvmsg(RECV_SIZE, socket.CMSG_SPACE(16))
        self.last_kernel = None
        for level, kind, raw in anc:
            if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS and len(raw) >= 16:
                sec, nsec = struct.unpack("qq", raw[:16])
                self.last_kernel = sec + nsec / 1e9
        return data


def _cpu_wait_ns() -> int | None:
    """Nanoseconds this thread has spent runnable but not running (None: the kernel does not say)."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _clock_pair() -> tuple[float, float]:
    """(wall clock, perf_counter) read together, so kernel (wall) times convert to the request's clock."""
    best = (0.0, 0.0, float("inf"))
    for _ in range(5):
        a = time.time()
        t = time.perf_counter()
        b = time.time()
        if b - a < best[2]:
            best = ((a + b) / 2, t, b - a)
        if b - a < 20e-6:
            break
    return best[0], best[1]


def _request_bytes(host: str, port: int, path: str, body: dict[str, Any]) -> bytes:
    payload = json.dumps(body).encode("utf-8")
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nContent-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + payload


def timed_request(url: str, path: str, body: dict[str, Any], timeout: float, batch_t0: float) -> dict[str, Any]:
    """Send one request and time each SSE data line; errors are recorded, never raised."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    rec: dict[str, Any] = {"start_s": 0.0, "status": None, "error": None, "events": [], "kernel_stamps": False, "cpu_wait_ms": None}
    wire = _request_bytes(host, port, path, body)
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        rec["error"] = f"cannot connect to {host}:{port}: {exc}"
        return rec
    with sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = _Reader(sock)
        rec["kernel_stamps"] = reader.kernel_stamps
        wall0, t0 = _clock_pair()
        rec["start_s"] = t0 - batch_t0
        wait0 = _cpu_wait_ns()
        try:
            sock.sendall(wire)
            _read_response(reader, rec, t0, wall0)
        except (OSError, ValueError) as exc:
            rec["error"] = f"{type(exc).__name__}: {exc}"
        wait1 = _cpu_wait_ns()
        if wait0 is not None and wait1 is not None:
            rec["cpu_wait_ms"] = (wait1 - wait0) / 1e6
    return rec


def _read_response(reader: _Reader, rec: dict[str, Any], t0: float, wall0: float) -> None:
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = reader.recv()
        if not data:
            raise ValueError("connection closed before the response headers")
        buf += data
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    try:
        rec["status"] = int(lines[0].split()[1])
    except (IndexError, ValueError):
        raise ValueError(f"not an HTTP response: {lines[0][:80]!r}") from None
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    chunked = "chunked" in headers.get("transfer-encoding", "").lower()
    body = _Body(chunked)
    text = b""
    events = rec["events"]
    pending = rest
    while True:
        if pending:
            text += body.feed(pending)
            pending = b""
            while b"\n" in text:
                line, _, text = text.partition(b"\n")
                if line.startswith(b"data:"):
                    user_ms = (time.perf_counter() - t0) * 1000.0
                    k = reader.last_kernel
                    kernel_ms = (k - wall0) * 1000.0 if k is not None else None
                    events.append([user_ms, kernel_ms, line.decode("utf-8", "replace").rstrip("\r")])
        if body.done:
            break
        data = reader.recv()
        if not data:
            break
        pending = data
    if rec["status"] != 200:
        rec["error"] = f"HTTP {rec['status']}: {' '.join((body.raw + text).decode('utf-8', 'replace').split())[:300]}"


class _Body:
    """Undo HTTP/1.1 chunked transfer coding incrementally (or pass bytes through)."""

    def __init__(self, chunked: bool) -> None:
        self.chunked = chunked
        self.done = False
        self.raw = b""
        self._buf = b""
        self._left = -1  # bytes left in the current chunk; -1: expecting a size line

    def feed(self, data: bytes) -> bytes:
        if not self.chunked:
            self.raw += data[:300] if len(self.raw) < 300 else b""
            return data
        self._buf += data
        out = b""
        while self._buf and not self.done:
            if self._left < 0:
                if b"\r\n" not in self._buf:
                    break
                size_line, _, self._buf = self._buf.partition(b"\r\n")
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.done = True
                    break
                self._left = size
            take = self._buf[: self._left]
            out += take
            self._buf = self._buf[len(take):]
            self._left -= len(take)
            if self._left == 0:
                if len(self._buf) < 2:
                    self._left = 0
                    break
                self._buf = self._buf[2:]  # the CRLF after each chunk
                self._left = -1
        if len(self.raw) < 300:
            self.raw += out[:300]
        return out


def claim_cpu(realtime: bool, cpus: list[int] | None) -> str:
    """Pin and raise this process (threads started later inherit both); what it got, in words."""
    said = []
    if cpus:
        try:
            os.sched_setaffinity(0, set(cpus))
            said.append("on CPUs " + ",".join(str(c) for c in sorted(set(cpus))))
        except (OSError, ValueError) as exc:
            said.append(f"not pinned to CPUs {cpus} ({exc.strerror if isinstance(exc, OSError) else exc})")
    if not realtime:
        said.insert(0, "normal priority")
    else:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
            said.insert(0, "real-time priority (SCHED_FIFO 1)")
        except (OSError, AttributeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not on this system"
            said.insert(0, f"normal priority (real-time refused: {why})")
    return ", ".join(said)


def _proc_jiffies(stat: bytes) -> tuple[int, int]:
    """(session id, utime + stime) from a /proc/PID/stat line."""
    rest = stat[stat.rfind(b")") + 2 :].split()
    return int(rest[3]), int(rest[11]) + int(rest[12])


def host_sample(watch_sid: int | None) -> dict[str, Any]:
    """The host's load average, its busy/total CPU jiffies, this process's and the watched session's."""
    out: dict[str, Any] = {"t": time.time(), "cpus": os.cpu_count()}
    try:
        with open("/proc/loadavg", "rb") as f:
            out["load"] = [float(x) for x in f.read().split()[:3]]
        with open("/proc/stat", "rb") as f:
            cpu = [int(x) for x in f.readline().split()[1:]]
        out["total"], out["busy"] = sum(cpu[:8]), sum(cpu[:8]) - cpu[3] - (cpu[4] if len(cpu) > 4 else 0)
        with open("/proc/self/stat", "rb") as f:
            out["self"] = _proc_jiffies(f.read())[1]
    except (OSError, ValueError, IndexError):
        return out
    if watch_sid:
        server = 0
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    sid, jiffies = _proc_jiffies(f.read())
            except (OSError, ValueError, IndexError):
                continue
            if sid == watch_sid or int(name) == watch_sid:
                server += jiffies
        out["server"] = server
    return out


def _procs_running() -> int | None:
    try:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"procs_running "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


class _RunQueue:
    """Samples the host's runnable tasks every ``every`` seconds while a batch runs (a load average
    reacts over a minute; this is the round's own)."""

    def __init__(self, every: float = 0.1) -> None:
        self.every = every
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            n = _procs_running()
            if n is not None:
                self.samples.append(n)

    def __enter__(self) -> _RunQueue:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def mean(self) -> float | None:
        # the sampler itself is running when it reads: one less is what else wanted a CPU
        return sum(self.samples) / len(self.samples) - 1 if self.samples else None


def run(request: dict[str, Any]) -> dict[str, Any]:
    watch = request.get("watch_sid")
    watch_sid = int(watch) if isinstance(watch, int) and watch > 0 else None
    before = host_sample(watch_sid)
    queue = _RunQueue()
    priority = claim_cpu(bool(request.get("realtime", True)), [int(c) for c in request.get("cpus") or []] or None)
    url, path = str(request["url"]), str(request.get("path", "/v1/chat/completions"))
    bodies = list(request["bodies"])
    timeout = float(request.get("timeout", 300.0))
    slots = max(1, int(request.get("concurrency", 1)))
    records: list[dict[str, Any] | None] = [None] * len(bodies)
    lock = threading.Lock()
    todo = iter(range(len(bodies)))
    t0 = time.perf_counter()

    def worker() -> None:
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            try:
                records[i] = timed_request(url, path, bodies[i], timeout, t0)
            except Exception as exc:  # one bad request must not lose the others' records
                records[i] = {"start_s": 0.0, "status": None, "error": f"{type(exc).__name__}: {exc}", "events": [], "kernel_stamps": False, "cpu_wait_ms": None}

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(slots, len(bodies)) or 1)]
    with queue:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    duration = time.perf_counter() - t0
    host = {"before": before, "after": host_sample(watch_sid), "runnable": queue.mean()}
    return {"duration_s": duration, "priority": priority, "records": records, "host": host}


def main() -> int:
    try:
        request = json.loads(sys.stdin.read())
    except ValueError as exc:
        print(json.dumps({"error": f"bad request on stdin: {exc}"}))
        return 2
    print(json.dumps(run(request)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
