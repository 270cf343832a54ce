"""What the GPU sampler costs a host: CPU seconds per sample (the sampler and its nvidia-smi children).

Prints figures; asserts nothing. Runs ``engines/helpers/gpusample.py`` as servelab runs it on a host,
once per mode: ``--count N --interval I`` (a watch: one long-lived ``nvidia-smi -lms``) and
``--count 1`` N times (one sample per call, what a one-off ``servelab gpus HOST`` costs), and reads
the CPU time of the finished process tree (``RUSAGE_CHILDREN``: start-up included) and, for the
watch, the sampler's own per-sample ``cpu_s`` after its first sample (steady state). On a host without a GPU, put
``tests/fake_nvidia_smi`` first on PATH with FAKE_SMI_GPUS/FAKE_SMI_APPS set (the figures are then
the fake's, a Python script, not nvidia-smi's). 1 % of a core at one sample a second is 0.010 s.

    python3 bench/gpusample_cost.py [--samples 30] [--interval 1.0]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

SAMPLER = Path(__file__).resolve().parent.parent / "engines" / "helpers" / "gpusample.py"


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def watch(samples: int, interval: float) -> dict[str, float]:
    c0, t0 = cpu(), time.monotonic()
    out = subprocess.run(
        [sys.executable, str(SAMPLER), "--count", str(samples), "--interval", str(interval)],
        capture_output=True, text=True, check=False,
    ).stdout
    lines = [json.loads(x) for x in out.splitlines()]
    n = len([x for x in lines if x.get("gpu")])
    spent = cpu() - c0
    steady = [x["cpu_s"] for x in lines[1:] if x.get("gpu")]  # the sampler's own figure, start-up left out
    per = sum(steady) / max(1, len(steady))
    return {"samples": n, "wall_s": time.monotonic() - t0, "cpu_s_per_sample": spent / max(1, n),
            "pct_core_at_interval": 100 * spent / max(1e-9, n * interval),
            "steady_cpu_s_per_sample": per, "steady_pct_core_at_interval": 100 * per / max(1e-9, interval)}


def one_shots(samples: int) -> dict[str, float]:
    c0 = cpu()
    for _ in range(samples):
        subprocess.run([sys.executable, str(SAMPLER)], capture_output=True, check=False)
    spent = cpu() - c0
    return {"samples": samples, "cpu_s_per_call": spent / samples}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--interval", type=float, default=1.0)
    a = ap.parse_args()
    print(json.dumps({"watch": watch(a.samples, a.interval), "one_shot": one_shots(min(a.samples, 10))}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
