"""StubEngine: stands in for ``python -m vllm.entrypoints.openai.api_server`` in lifecycle tests.

A real process (not a mock) that behaves like an engine where the lifecycle cares: it prints its
exact argv, writes numbered lines to stdout at a steady pace, spawns worker children in its process
group, optionally serves HTTP on ``--port``, and exits with a chosen code. Settings come from
environment variables (an experiment's ``[env]`` table):

STUB_LINES (default: forever), STUB_INTERVAL (s, 0.01), STUB_CHILDREN (0), STUB_STUBBORN (1: a child
ignores SIGTERM), STUB_UNMARKED (1: the children start without servelab's run marker in their
environment, in the engine's process group, as a worker an engine starts with a fresh environment), STUB_HTTP (1: serve GET / on --port), STUB_EXIT (exit code after the lines), STUB_SHM (1: leave a /dev/shm file behind, as engines do; one per prefix of STUB_SHM_PREFIXES, comma-separated, psm_ by default).
With STUB_HTTP it also answers /v1/models, /metrics, streamed POST /v1/chat/completions (one
token per chunk, STUB_TOKEN_S apart, usage last) and a plain POST /v1/completions, and exits with code 3 on request
STUB_DIE_AFTER_REQUESTS + 1 (an engine crashing mid-probe). STUB_LOG: a file whose lines it prints
first, verbatim (a recorded engine log, or its cut: the stages a real engine would print).
On SIGTERM: STUB_TERM_LOG, a file whose lines it prints then (a recorded engine's shutdown lines),
STUB_TERM_S (s, 0) it takes to die, STUB_TERM_SHM (1: it makes and maps a /dev/shm ``sem.mp-*`` file
then, held until it dies), and STUB_TERM_KILL (1: it ends by SIGKILLing itself, as SGLang's
kill_process_tree does: exit code -9); else it exits 143.
"""

from __future__ import annotations

import http.server
import json
import mmap
import os
import signal
import subprocess
import sys
import threading
import time


def _port(argv: list[str]) -> int:
    return int(argv[argv.index("--port") + 1]) if "--port" in argv else 8000


_served = {"requests": 0}


def _chat_stream(handler: http.server.BaseHTTPRequestHandler) -> None:
    """A streamed chat completion in the OpenAI SSE shape: ``max_tokens`` one-token chunks, then usage."""
    length = int(handler.headers.get("Content-Length") or 0)
    req = json.loads(handler.rfile.read(length) or b"{}")
    _served["requests"] += 1
    die_after = int(os.environ.get("STUB_DIE_AFTER_REQUESTS", "0"))
    if die_after and _served["requests"] > die_after:
        os._exit(3)  # the engine crashing mid-probe
    n = int(req.get("max_tokens") or 16)
    pause = float(os.environ.get("STUB_TOKEN_S", "0.001"))
    if not req.get("stream"):
        body = json.dumps({"choices": [{"message": {"role": "assistant", "content": "x" * n}, "finish_reason": "length"}], "usage": {"prompt_tokens": 3, "completion_tokens": n}}).encode()
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
        return
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Connection", "close")
    handler.end_headers()

    def send(payload: object) -> None:
        handler.wfile.write(b"data: " + (payload if isinstance(payload, bytes) else json.dumps(payload).encode()) + b"\n\n")
        handler.wfile.flush()

    send({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
    for i in range(n):
        time.sleep(pause)
        last = i == n - 1
        send({"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "length" if last else None}]})
    send({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": n}})
    send(b"[DONE]")
    handler.close_connection = True


def _completion(handler: http.server.BaseHTTPRequestHandler) -> None:
    """A plain (not streamed) completion of ``max_tokens`` tokens, as ``/v1/completions`` answers."""
    length = int(handler.headers.get("Content-Length") or 0)
    n = int(json.loads(handler.rfile.read(length) or b"{}").get("max_tokens") or 16)
    _served["requests"] += 1
    body = json.dumps({"choices": [{"index": 0, "text": " x" * n, "finish_reason": "length"}], "usage": {"prompt_tokens": 3, "completion_tokens": n}}).encode()
    handler.send_response(200)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def _serve(port: int) -> None:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            info: dict[str, object] = {"stub": True, "pid": os.getpid()}
            if self.path == "/v1/models":
                info["data"] = [{"id": "stub-model"}]
            body = json.dumps(info).encode()
            if self.path == "/metrics":  # Prometheus text, as engines expose it
                body = f"# TYPE stub_requests counter\nstub_requests_total {_served['requests']}\n".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:  # noqa: N802
            if self.path == "/v1/completions":
                _completion(self)
                return
            if self.path != "/v1/chat/completions":
                self.send_error(404)
                return
            _chat_stream(self)

        def log_message(self, *args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()


#: Shared memory this stub keeps mapped until it exits.
_HELD: list[mmap.mmap] = []


def _on_term(*_: object) -> None:
    """A stop: print the shutdown lines a real engine prints, take the time it takes, die its way."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.environ.get("STUB_TERM_LOG"):
        with open(os.environ["STUB_TERM_LOG"], "rb") as f:
            sys.stdout.buffer.write(f.read())
        sys.stdout.flush()
    if os.environ.get("STUB_TERM_SHM") == "1":  # a semaphore made during shutdown, as SGLang's children leave one
        path = f"/dev/shm/sem.mp-servelabstub{os.getpid()}"
        with open(path, "w+b") as f:
            f.write(b"\0" * 32)
            f.flush()
            _HELD.append(mmap.mmap(f.fileno(), 32))
        print("STUB term shm " + path, flush=True)
    time.sleep(float(os.environ.get("STUB_TERM_S", "0")))
    if os.environ.get("STUB_TERM_KILL") == "1":
        os.kill(os.getpid(), signal.SIGKILL)
    sys.exit(143)


def main() -> int:
    argv = sys.argv[1:]
    print("STUB argv " + json.dumps(argv), flush=True)
    children = []
    for i in range(int(os.environ.get("STUB_CHILDREN", "0"))):
        stubborn = os.environ.get("STUB_STUBBORN") == "1" and i == 0
        code = "import signal,time\n" + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if stubborn else "") + "while True: time.sleep(0.2)\n"
        env = {k: v for k, v in os.environ.items() if k != "SERVELAB_RUN_ID"} if os.environ.get("STUB_UNMARKED") == "1" else None
        children.append(subprocess.Popen([sys.executable, "-c", code, "stub-worker", str(i)], env=env))
    print("STUB children " + json.dumps([c.pid for c in children]), flush=True)
    if os.environ.get("STUB_SHM") == "1":
        for prefix in os.environ.get("STUB_SHM_PREFIXES", "psm_").split(","):  # psm_: Python's shared_memory blocks
            shm = f"/dev/shm/{prefix}servelabstub{os.getpid()}"
            with open(shm, "w+b") as f:
                f.write(b"\0" * 4096)
                f.flush()
                _HELD.append(mmap.mmap(f.fileno(), 4096))  # mapped while the engine lives, as engines do
            print("STUB shm " + shm, flush=True)
    if os.environ.get("STUB_HTTP") == "1":
        _serve(_port(argv))
        print("STUB serving", flush=True)
    if os.environ.get("STUB_LOG"):
        with open(os.environ["STUB_LOG"], "rb") as f:
            sys.stdout.buffer.write(f.read())
        sys.stdout.flush()
    lines = int(os.environ.get("STUB_LINES", "-1"))
    interval = float(os.environ.get("STUB_INTERVAL", "0.01"))
    signal.signal(signal.SIGTERM, _on_term)
    n = 0
    while lines < 0 or n < lines:
        print(f"line {n:08d}", flush=True)
        n += 1
        time.sleep(interval)
    print("STUB done", flush=True)
    return int(os.environ.get("STUB_EXIT", "0"))


if __name__ == "__main__":
    sys.exit(main())
