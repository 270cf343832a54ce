"""Re-record the SGLang logs in this folder (run with the app venv from the repo root, under the engine lock).

    flock /tmp/servelab-engine.lock .venv/bin/python tests/data/logs/record_sglang_logs.py [case ...]

Each case starts the real SGLang 0.5.23 (``.venv-sglang``, its CPU path: ``SGLANG_USE_CPU_ENGINE=1
--device cpu``, FakeSglKernel standing in for sgl_kernel) on the tiny model with one thing wrong (or
nothing, for ``good-serve``), saves stdout+stderr as ``sglang-cpu-<case>.log`` and writes, as line 1,
how the file was made. Every server binds 127.0.0.1 and sizes its KV cache by ``--max-total-tokens``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from recorder import During, record  # noqa: E402  (beside this script)

from tests.fixtures.procs import members  # noqa: E402

OUT = Path(__file__).resolve().parent
PY = REPO / ".venv-sglang" / "bin" / "python"
MODEL = REPO / ".models" / "tiny-llama"
PORT = 8792
BASE = ["-m", "sglang.launch_server", "--device", "cpu", "--host", "127.0.0.1", "--port", str(PORT), "--max-total-tokens", "2048"]
GOOD = [*BASE, "--model-path", str(MODEL), "--mem-fraction-static", "0.8", "--decode-log-interval", "10"]
ENV = {"SGLANG_USE_CPU_ENGINE": "1"}


def _wait_for(log: Path, needle: bytes, proc: subprocess.Popen[bytes], timeout: float = 600) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if needle in log.read_bytes():
            return True
        time.sleep(0.5)
    return False


def _run(name: str, why: str, args: list[str], during: During | None = None, timeout: float = 300) -> None:
    record(OUT / f"sglang-cpu-{name}.log", f"tests/data/logs/record_sglang_logs.py {name}: sglang 0.5.23 (CPU, FakeSglKernel) {why}", PY, args,
           env={"PYTHONUNBUFFERED": "1", "NO_COLOR": "1", **ENV}, shown_env=ENV, during=during, timeout=timeout, cwd="/")


def _serve(n: int = 4) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{PORT}", timeout=120) as c:
        for i in range(n):
            c.post("/generate", json={"text": f"Count: one two three {i}", "sampling_params": {"max_new_tokens": 32, "temperature": 0}})
        c.post("/v1/chat/completions", json={"model": str(MODEL), "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 32, "temperature": 0})


def _serve_then_stop(proc: subprocess.Popen[bytes], log: Path) -> None:
    if _wait_for(log, b"The server is fired up and ready to roll", proc):
        _serve()
        time.sleep(2)
    os.killpg(proc.pid, signal.SIGTERM)


def _kill_scheduler_after_ready(proc: subprocess.Popen[bytes], log: Path) -> None:
    if not _wait_for(log, b"The server is fired up and ready to roll", proc):
        return
    _serve(1)
    schedulers = [pid for pid, cmd in members(pgrp=proc.pid).items() if "sglang::scheduler" in cmd]
    for pid in schedulers:
        os.kill(pid, signal.SIGKILL)  # a child of the server this recorder started
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pass


def _sigterm_while_loading(proc: subprocess.Popen[bytes], log: Path) -> None:
    if _wait_for(log, b"Load weight begin", proc):
        os.killpg(proc.pid, signal.SIGTERM)


def _port_in_use() -> None:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", PORT))
        s.listen()
        _run("port-in-use", f"port {PORT} already taken by another listener on 127.0.0.1", GOOD, timeout=300)


CASES: dict[str, Callable[[], None]] = {
    "good-serve": lambda: _run("good-serve", "started, served 4 /generate and 1 chat completion, stopped with SIGTERM to its group", GOOD, during=_serve_then_stop, timeout=600),
    "bad-flag": lambda: _run("bad-flag", "an unknown flag", [*GOOD, "--no-such-flag", "1"]),
    "missing-model": lambda: _run("missing-model", "a model path that does not exist", [*BASE, "--model-path", "/nonexistent/models/tiny-llama"]),
    "bad-speculative-algorithm": lambda: _run("bad-speculative-algorithm", "an unknown speculative algorithm", [*GOOD, "--speculative-algorithm", "EAGLE9"]),
    # No "memory too high" case: on this CPU SGLang 0.5.23 does not fail its memory check safely. With
    # --max-total-tokens it never profiles; without it, even --mem-fraction-static 0.01 came up (a
    # 317815-token KV cache with 20.7 GB free), and a fraction large enough to fail would first take
    # the shared machine's RAM. vLLM's recorded memory-too-high log covers the analyzer's rule.
    "port-in-use": _port_in_use,
    "crash-after-ready": lambda: _run(
        "crash-after-ready", "ready, served one request, then its scheduler process was killed (SIGKILL)", GOOD, during=_kill_scheduler_after_ready, timeout=600),
    "sigterm-while-loading": lambda: _run(
        "sigterm-while-loading", "SIGTERM to its group at 'Load weight begin'", GOOD, during=_sigterm_while_loading, timeout=300),
}


if __name__ == "__main__":
    for case in sys.argv[1:] or list(CASES):
        CASES[case]()
