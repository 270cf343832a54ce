"""The GPU rows proven on a real GPU host (the `device` tool's H200): servelab launches a torch stand-in
(``bench/gpu_standin``: allocates in steps, serves /health) as a ``local`` run, samples the host as the
run screen does (``engines.gpus``: one ``gpusample.py`` call per second), sees the memory rise under the
run's pid, names a foreign torch process as foreign, stops the run and times the memory's return.

Prints JSON figures and writes them (and the GPU rows as the run screen draws their text) into OUT;
asserts nothing. Needs python with torch and servelab's core dependencies (pydantic, platformdirs).

    python3 bench/gpu_run_device.py OUT [--steps 4] [--step-gib 2] [--step-s 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from servelab.engines.catalog.folder import load_catalog  # noqa: E402
from servelab.engines.gpus.holders import run_memory  # noqa: E402
from servelab.engines.gpus.sample import sample_host  # noqa: E402
from servelab.engines.gpus.inventory import Holder  # noqa: E402
from servelab.engines.gpus.watch import SAMPLE_S, RunGpus  # noqa: E402
from servelab.engines.hosts.registry import close_all  # noqa: E402
from servelab.engines.runs.manager import Runs  # noqa: E402

STANDIN = REPO / "bench" / "gpu_standin"
FOREIGN = "import torch, time, sys; x = torch.empty(3 << 30, dtype=torch.uint8, device='cuda'); torch.cuda.synchronize(); print('held', flush=True); time.sleep(600)"


def panel_text(gpus: RunGpus) -> list[str]:
    marks = {Holder.THIS_RUN: "[this run]", Holder.OTHER_RUN: "[other run]", Holder.FOREIGN: "[foreign]"}
    return [f"{line.text}  {marks[line.holder]}" if line.holder else line.text for line in gpus.panel().lines]


async def main_async(out: Path, steps: int, step_gib: float, step_s: float, max_wait: float = 120.0) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="gpurun-"))
    folder = work / "experiments"
    folder.mkdir()
    (folder / "hosts.toml").write_text(f"[hosts.local]\npython = {json.dumps(sys.executable)}\nworkdir = {json.dumps(str(work / 'w'))}\n")
    trace = work / "trace.jsonl"
    port = 18777
    env = {"PYTHONPATH": os.pathsep.join([str(STANDIN), *filter(None, [os.environ.get("STANDIN_EXTRA_PATH")])]), "STANDIN_STEPS": str(steps), "STANDIN_STEP_GIB": str(step_gib), "STANDIN_STEP_S": str(step_s), "STANDIN_TRACE": str(trace)}
    lines = ['engine = "vllm"', 'host = "local"', f"model = {json.dumps(str(work / 'no-model'))}", f"port = {port}", "[env]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in env.items()]
    (folder / "standin.toml").write_text("\n".join(lines) + "\n")
    runs = Runs(load_catalog(folder))
    host = runs.host("local")
    figures: dict[str, object] = {}
    baseline = await sample_host(host)
    figures["baseline"] = [(g.index, g.name, g.memory_used_mib) for g in baseline.gpus]
    t_launch = time.time()
    rec = await runs.launch("standin", skip_preflight=True)
    figures["launch_s"] = time.time() - t_launch
    figures["run"] = {"id": rec.id, "pid": rec.pid, "pgid": rec.pgid}
    # the foreign process comes after the launch: runctl refuses a launch on a GPU another process holds
    foreign = subprocess.Popen([sys.executable, "-c", FOREIGN], stdout=subprocess.PIPE, text=True)
    assert foreign.stdout is not None
    foreign.stdout.readline()
    gpus = RunGpus(rec)
    seen: list[tuple[float, int, int, list[tuple[int | None, str | None, int | None]]]] = []
    costs: list[float] = []
    health = False
    deadline = time.time() + steps * step_s + max_wait
    last_mine = -1
    while time.time() < deadline:
        s = await sample_host(host)
        costs.append(s.cpu_s)
        gpus.feed(s, None)
        mine = sum(run_memory(s, gpus.track.run).values())
        foreign_mib = sum(p.used_mib or 0 for p in s.processes if p.pid == foreign.pid)
        if mine != last_mine:
            seen.append((s.t, mine, foreign_mib, [(p.pid, p.run_id, p.used_mib) for p in s.processes]))
            last_mine = mine
        steps_done = len(trace.read_text().splitlines()) if trace.exists() else 0
        if steps_done >= steps and not health:
            try:
                health = urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status == 200
            except OSError:
                health = False
        if health and steps_done >= steps and mine > 0:
            break
        await asyncio.sleep(SAMPLE_S)
    figures["health"] = health
    figures["rows_running"] = panel_text(gpus)
    allocs = [json.loads(x) for x in trace.read_text().splitlines()] if trace.exists() else []
    latencies = []
    for a in allocs:
        first = next((x for x in seen if x[0] >= a["t"] and x[1] >= a["allocated"] >> 20), None)
        latencies.append(None if first is None else round(first[0] - a["t"], 3))
    figures["steps"] = allocs
    figures["rise"] = [{"t": t, "run_mib": m, "foreign_mib": f, "holders": h} for t, m, f, h in seen]
    figures["alloc_to_screen_s"] = latencies
    t_stop = time.time()
    st = await runs.stop(rec.id, grace=10)
    figures["stop_call_s"] = time.time() - t_stop
    figures["stopped"] = str(st.status)
    gpus.ended(t_stop)
    while not gpus.done and time.time() - t_stop < 60:
        s = await sample_host(host)
        gpus.feed(s, None)
        await asyncio.sleep(0.25)
    figures["release"] = gpus.outcome.message if gpus.outcome else None
    figures["stop_to_free_s"] = gpus.outcome.seconds if gpus.outcome else None
    after = await sample_host(host)
    figures["foreign_after"] = [(p.pid, p.used_mib) for p in after.processes]
    figures["foreign_alive"] = foreign.poll() is None
    figures["rows_after"] = panel_text(gpus)
    figures["figures"] = gpus.track.figures.to_json()
    record = json.loads(Path(rec.run_dir, "run.json").read_text())  # what the host-side supervisor kept
    figures["record"] = {k: record.get(k) for k in ("gpu_peak_mib", "gpu_first_alloc_s", "status", "exit_code")}
    figures["sampler_cpu_s_per_call_median"] = sorted(costs)[len(costs) // 2] if costs else None
    foreign.kill()
    foreign.wait()
    await close_all()
    return figures


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--step-gib", type=float, default=2.0)
    ap.add_argument("--step-s", type=float, default=2.0)
    ap.add_argument("--max-wait", type=float, default=120.0)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    figures = asyncio.run(main_async(out, a.steps, a.step_gib, a.step_s, a.max_wait))
    (out / "gpu_run.json").write_text(json.dumps(figures, indent=1))
    rows = ["while running:", *map(str, figures["rows_running"]), "after the stop:", *map(str, figures["rows_after"])]  # type: ignore[call-overload]  # lists of str, from main_async
    (out / "gpu_rows.txt").write_text("\n".join(rows) + "\n")
    print(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
