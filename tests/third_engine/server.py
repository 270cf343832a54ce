"""ToyLLM: a TEST DOUBLE of an inference server, the third engine of tests/test_third_engine.py.

Standard library only. A real process on 127.0.0.1 that speaks the OpenAI-compatible routes the
core asks any engine (``/health``, ``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``
streamed with usage, ``/metrics`` in Prometheus text, ``/version``) and logs in a format of its own,
unlike vLLM's and SGLang's::

    [toyllm 12:00:00] starting toyllm 0.3.1 (model tiny, port 8000)
    [toyllm 12:00:00] loading weights 1/3
    [toyllm 12:00:00] weights loaded in 0.06 s
    [toyllm] ready on port 8000

It "speculates": with ``--spec-tokens K`` each step drafts K tokens and accepts half of them
(rounded up), counted in ``/metrics``. It starts one worker process (its process group has two
members) and holds a file in /dev/shm named with its prefix ``toyllm_`` that it leaves behind on
SIGTERM, as real engines do. ``check(flags)`` is its argument check (run by servelab's frame on the host).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

VERSION = "0.3.1"
#: Prefix of the files it makes in /dev/shm (the adapter's ``shm_prefixes``).
SHM_PREFIX = "toyllm_"
#: Seconds a token takes (so the probe measures something).
TOKEN_S = 0.002


def log(msg: str, stamp: bool = True) -> None:
    head = f"[toyllm {time.strftime('%H:%M:%S')}]" if stamp else "[toyllm]"
    print(f"{head} {msg}", flush=True)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="toyllm", exit_on_error=False)
    p.add_argument("--model", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--served-model-name")
    p.add_argument("--spec-tokens", type=int, default=0)
    p.add_argument("--load-steps", type=int, default=3)
    p.add_argument("--max-len", type=int, default=2048)
    return p


def check(flags: list[str]) -> list[str]:
    """ToyLLM's own argument check, for servelab's host-side frame (which provides ``run_argparse``)."""
    run_argparse(parser().parse_args, flags)  # type: ignore[name-defined]  # noqa: F821
    return []


class Stats:
    """What /metrics exposes: request and token counters, the acceptance counters, latency histograms."""

    def __init__(self, spec_tokens: int) -> None:
        self.lock = threading.Lock()
        self.spec_tokens = spec_tokens
        self.requests = 0
        self.tokens = 0
        self.drafts = 0
        self.draft_tokens = 0
        self.accepted = 0
        self.ttft = [0.0, 0]  # sum (s), count
        self.itl = [0.0, 0]

    def prometheus(self) -> str:
        with self.lock:
            lines = [
                "# TYPE toyllm:requests counter", f"toyllm:requests_total {self.requests}",
                "# TYPE toyllm:generation_tokens counter", f"toyllm:generation_tokens_total {self.tokens}",
                "# TYPE toyllm:spec_drafts counter", f"toyllm:spec_drafts_total {self.drafts}",
                "# TYPE toyllm:spec_draft_tokens counter", f"toyllm:spec_draft_tokens_total {self.draft_tokens}",
                "# TYPE toyllm:spec_accepted_tokens counter", f"toyllm:spec_accepted_tokens_total {self.accepted}",
            ]
            for name, (total, count) in (("toyllm:time_to_first_token_seconds", self.ttft), ("toyllm:inter_token_latency_seconds", self.itl)):
                lines += [f"# TYPE {name} histogram", f'{name}_bucket{{le="+Inf"}} {count}', f"{name}_sum {total}", f"{name}_count {count}"]
        return "\n".join(lines) + "\n"


class Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # its own access line, in its own format
        log(f"{self.command} {self.path} {args[1] if len(args) > 1 else ''}".rstrip())

    def _send(self, code: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, code: int, obj: Any) -> None:
        self._send(code, json.dumps(obj).encode())

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, b"")
        elif self.path == "/version":
            self._json(200, {"version": VERSION})
        elif self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": self.server.model, "object": "model", "max_model_len": self.server.max_len}]})
        elif self.path == "/metrics":
            self._send(200, self.server.stats.prometheus().encode(), "text/plain; version=0.0.4")
        else:
            self._json(404, {"error": f"no route {self.path}"})

    def do_POST(self) -> None:
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        except ValueError:
            self._json(400, {"error": "body is not JSON"})
            return
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            self._json(404, {"error": f"no route {self.path}"})
            return
        chat = self.path == "/v1/chat/completions"
        n = max(1, int(body.get("max_tokens") or 16))
        if body.get("stream"):
            self._stream(n, chat, bool((body.get("stream_options") or {}).get("include_usage")))
            return
        steps = self._generate(n, lambda _piece: None)
        text = "ab" * (n // 2) + "a" * (n % 2)
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
        choice.update({"message": {"role": "assistant", "content": text}} if chat else {"text": text})
        self._json(200, {"id": "toy-1", "object": "chat.completion" if chat else "text_completion", "model": self.server.model,
                         "choices": [choice], "usage": {"prompt_tokens": 7, "completion_tokens": n, "total_tokens": 7 + n, "steps": steps}})

    def _generate(self, n: int, emit: Any) -> int:
        """Make ``n`` tokens in steps (1 + accepted drafts each), calling ``emit`` per step; the steps taken."""
        stats = self.server.stats
        k = stats.spec_tokens
        t0 = time.monotonic()
        last = t0
        made = steps = 0
        while made < n:
            accepted = -(-k // 2)
            step = min(1 + accepted, n - made)
            time.sleep(TOKEN_S * step)
            emit("ab"[:step] if step <= 2 else "a" * step)
            now = time.monotonic()
            with stats.lock:
                if steps == 0:
                    stats.ttft[0] += now - t0
                    stats.ttft[1] += 1
                else:
                    stats.itl[0] += now - last
                    stats.itl[1] += 1
                if k:
                    stats.drafts += 1
                    stats.draft_tokens += k
                    stats.accepted += step - 1
            last = now
            made += step
            steps += 1
        with stats.lock:
            stats.requests += 1
            stats.tokens += n
        return steps

    def _stream(self, n: int, chat: bool, usage: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        base = {"id": "toy-1", "object": "chat.completion.chunk" if chat else "text_completion", "model": self.server.model}

        def send(obj: Any) -> None:
            self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
            self.wfile.flush()

        def piece(text: str) -> None:
            send({**base, "choices": [{"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}]})

        if chat:
            send({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        self._generate(n, piece)
        send({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"} if chat else {"index": 0, "text": "", "finish_reason": "length"}]})
        if usage:
            send({**base, "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": n, "total_tokens": 7 + n}})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, model: str, max_len: int, stats: Stats) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.model, self.max_len, self.stats = model, max_len, stats


def worker() -> None:
    """The worker process: up until its group is signalled (SIGTERM's default action ends it)."""
    log(f"worker pid={os.getpid()} up")
    while True:
        time.sleep(60)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--worker"]:
        worker()
        return 0
    try:
        args = parser().parse_args(argv)
    except (argparse.ArgumentError, SystemExit) as exc:
        print(f"toyllm: error: {exc}", file=sys.stderr, flush=True)
        return 2
    model = args.served_model_name or os.path.basename(args.model.rstrip("/")) or "toy"
    log(f"starting toyllm {VERSION} (model {model}, port {args.port})")
    log(f"config: {dict(max_len=args.max_len, spec_tokens=args.spec_tokens)!r}")
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"])
    shm = open(f"/dev/shm/{SHM_PREFIX}{os.getpid()}", "wb")  # held until it dies, left behind on SIGTERM
    t0 = time.monotonic()
    for i in range(1, args.load_steps + 1):
        time.sleep(0.02)
        log(f"loading weights {i}/{args.load_steps}")
    log(f"weights loaded in {time.monotonic() - t0:.2f} s")
    log("warming up")
    httpd = Server(args.port, model, args.max_len, Stats(args.spec_tokens))

    def stop(signum: int, _frame: object) -> None:
        log(f"shutting down (signal {signum})", stamp=False)
        child.terminate()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    log(f"ready on port {args.port}", stamp=False)
    try:
        httpd.serve_forever()
    finally:
        shm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
