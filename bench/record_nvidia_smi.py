"""Record real nvidia-smi answers on a GPU host (the H200 of the `device` tool) for tests/data/nvidia_smi/.

Run on the GPU host with a Python that has torch (standard library otherwise); writes into OUT:

- ``idle-gpus.csv`` / ``idle-apps.csv``: the sampler's two queries with no process on the GPU;
- ``held-gpus.csv`` / ``held-apps.csv``: the same with a torch process holding memory
  (allocated in steps), and ``steps.jsonl``: per step, the bytes torch allocated, when, and when
  nvidia-smi first showed the new figure (allocation-to-sample latency);
- ``facts.json``: the torch child's own pid against the pid nvidia-smi names, the stop-to-free time
  (SIGKILL to the GPU's memory back at its baseline), and the sampler's cost (CPU seconds per sample).

Each .csv file's line 1 is the command that produced it (``# nvidia-smi ...``).

    python3 bench/record_nvidia_smi.py OUT [--step-gib 2] [--steps 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SAMPLER = HERE.parent / "engines" / "helpers" / "gpusample.py"
GPU_Q = ["--query-gpu=index,uuid,name,memory.used,memory.total,utilization.gpu,power.draw,temperature.gpu,pstate",
         "--format=csv,noheader,nounits"]
APP_Q = ["--query-compute-apps=pid,process_name,gpu_uuid,used_memory", "--format=csv,noheader,nounits"]

CHILD = r"""
import os, sys, time, torch
step = int(float(sys.argv[1]) * (1 << 30)); steps = int(sys.argv[2])
torch.cuda.init(); torch.zeros(1, device="cuda"); torch.cuda.synchronize()
print("READY %d %.4f" % (os.getpid(), time.time()), flush=True)
held = []
for i in range(steps):
    sys.stdin.readline()
    held.append(torch.empty(step, dtype=torch.uint8, device="cuda")); torch.cuda.synchronize()
    print("STEP %d %.4f %d" % (i + 1, time.time(), torch.cuda.memory_allocated()), flush=True)
sys.stdin.readline()
"""


def smi(args: list[str]) -> str:
    return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, check=False).stdout


def save(out: Path, name: str, args: list[str]) -> str:
    text = smi(args)
    (out / name).write_text("# nvidia-smi " + " ".join(args) + "\n" + text)
    return text


def used(text: str) -> list[int]:
    return [int(float(line.split(",")[3])) for line in text.splitlines() if line.strip()]


def sampler_cost(samples: int, apps_every: int) -> dict[str, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, str(SAMPLER), "--count", str(samples), "--interval", "0",
                           "--apps-every", str(apps_every)], capture_output=True, text=True, check=False)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.strip()]
    own = sum(x.get("cpu_s", 0.0) for x in lines)
    return {"samples": len(lines), "apps_every": apps_every, "cpu_s_per_sample": cpu / max(1, len(lines)),
            "sampler_reported_cpu_s_per_sample": own / max(1, len(lines)), "wall_s_per_sample": wall / max(1, len(lines)),
            "pct_of_core_at_1hz": 100 * cpu / max(1, len(lines))}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--step-gib", type=float, default=2.0)
    ap.add_argument("--steps", type=int, default=5)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    facts: dict[str, object] = {}
    baseline = used(save(out, "idle-gpus.csv", GPU_Q))
    save(out, "idle-apps.csv", APP_Q)
    facts["baseline_mib"] = baseline
    facts["cost_idle"] = [sampler_cost(50, 10), sampler_cost(50, 1)]
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(a.step_gib), str(a.steps)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout and child.stdin
    ready = child.stdout.readline().split()
    facts["child_pid"] = int(ready[1])
    steps = []
    last = used(smi(GPU_Q))
    for _ in range(a.steps):
        child.stdin.write("\n"); child.stdin.flush()
        _, n, t_alloc, allocated = child.stdout.readline().split()
        polls = 0
        while True:
            now = used(smi(GPU_Q)); polls += 1
            if now != last or polls > 200:
                break
        seen = time.time()
        steps.append({"step": int(n), "allocated": int(allocated), "t_alloc": float(t_alloc), "t_seen": seen,
                      "latency_s": seen - float(t_alloc), "used_mib": now, "polls": polls})
        last = now
    (out / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    save(out, "held-gpus.csv", GPU_Q)
    apps = save(out, "held-apps.csv", APP_Q)
    smi_pids = [line.split(",")[0].strip() for line in apps.splitlines() if line.strip()]
    facts["smi_pids"] = smi_pids
    facts["pid_matches"] = str(facts["child_pid"]) in smi_pids
    facts["cost_held"] = [sampler_cost(50, 10), sampler_cost(50, 1)]
    s = subprocess.run([sys.executable, str(SAMPLER), "--count", "1"], capture_output=True, text=True)
    (out / "sample-held.json").write_text(s.stdout)
    other = subprocess.Popen([sys.executable, "-c", CHILD, "1", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert other.stdout and other.stdin
    facts["other_pid"] = int(other.stdout.readline().split()[1])
    other.stdin.write("\n"); other.stdin.flush(); other.stdout.readline()
    time.sleep(0.5)
    save(out, "two-gpus.csv", GPU_Q)
    save(out, "two-apps.csv", APP_Q)
    other.kill(); other.wait()
    t_kill = time.time()
    child.send_signal(signal.SIGKILL)
    child.wait()
    t_exit = time.time()
    while used(smi(GPU_Q)) != baseline and time.time() - t_kill < 30:
        time.sleep(0.02)
    facts["stop_to_free_s"] = time.time() - t_kill
    facts["exit_to_free_s"] = time.time() - t_exit
    facts["after_mib"] = used(smi(GPU_Q))
    t0 = time.monotonic(); smi(GPU_Q); facts["one_query_wall_s"] = time.monotonic() - t0
    (out / "facts.json").write_text(json.dumps(facts, indent=1))
    print(json.dumps(facts, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
