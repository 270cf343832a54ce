"""What the GPU sampler costs a host: CPU seconds per sample (the sampler and its nvidia-smi children).

Prints figures; asserts nothing. Runs ``engines/helpers/gpusample.py`` as servelab runs it on a host,
once per mode: ``--count N --interval I`` (a watch: one long-lived ``nvidia-smi -lms``) and
``--count 1`` N times (one sample per call, what a one-off ``servelab gpus HOST`` costs), and reads
the CPU time of the finished process tree (``RUSAGE_CHILDREN``: start-up included) and, for the
watch, the sampler's own per-sample ``cpu_s`` after its first sample (steady state). On a host without a GPU, put
``tests/fake_nvidia_smi`` first on PATH with FAKE_SMI_GPUS/FAKE_SMI_APPS set (the figures are then
the fake's, a Python script, not nvidia-smi's; ``--fake`` does this). 1 % of a core at one sample a
second is 0.010 s.

``dashboard`` compares what a live view costs the host per sample, through the core on a local host:
``one_shot`` is ``gpus.sample.sample_host`` once a sample (what the run screen did: Python and two
nvidia-smi calls started each second), ``streamed`` is ``gpus.stream.GpuStream`` (one sampler, one
``nvidia-smi -lms`` loop, read as a stream: what the run screen and host view do now), each the CPU
time of the finished process trees divided by the samples read (``streamed_steady``: the
sampler's own ``cpu_s`` after its first sample, start-up left out).

    python3 bench/gpusample_cost.py [--samples 30] [--interval 1.0] [--fake]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import tempfile
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SAMPLER = REPO / "engines" / "helpers" / "gpusample.py"


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


async def dashboard(samples: int, interval: float) -> dict[str, dict[str, float]]:
    """The core's two ways to sample a local host, CPU seconds of their process trees per sample."""
    sys.path.insert(0, str(REPO))
    from servelab.engines.gpus.sample import sample_host
    from servelab.engines.gpus.stream import GpuStream
    from servelab.engines.hosts.local import LocalHost
    from servelab.engines.hosts.hostsfile import HostConfig

    with tempfile.TemporaryDirectory() as workdir:
        host = LocalHost(HostConfig(name="local", python=sys.executable, workdir=workdir))
        await sample_host(host)  # the upload, out of the figures
        c0 = cpu()
        for _ in range(samples):
            await sample_host(host)
        shot = (cpu() - c0) / samples
        c0 = cpu()
        own: list[float] = []  # the sampler's own figure per sample (its loop and its children)
        async with GpuStream(host, interval=interval) as stream:
            for _ in range(samples):
                own.append((await stream.next()).cpu_s)
        streamed = (cpu() - c0) / samples
        steady = own[1:] or [0.0]  # start-up (Python, the first nvidia-smi calls) left out

    def figures(per: float) -> dict[str, float]:
        return {"cpu_ms_per_sample": round(1000 * per, 2), "pct_core_at_1_hz": round(100 * per, 2)}

    return {"one_shot": figures(shot), "streamed": figures(streamed), "streamed_steady": figures(sum(steady) / len(steady))}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--fake", action="store_true", help="replay the recorded H200 answers (tests/fake_nvidia_smi)")
    a = ap.parse_args()
    if a.fake:
        recorded = REPO / "tests" / "data" / "nvidia_smi"
        os.environ["PATH"] = f"{REPO / 'tests' / 'fake_nvidia_smi'}{os.pathsep}{os.environ.get('PATH', '')}"
        os.environ["FAKE_SMI_GPUS"], os.environ["FAKE_SMI_APPS"] = str(recorded / "held-gpus.csv"), str(recorded / "held-apps.csv")
    print(json.dumps({
        "watch": watch(a.samples, a.interval),
        "one_shot": one_shots(min(a.samples, 10)),
        "dashboard": asyncio.run(dashboard(a.samples, a.interval)),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
