"""``helpers/gpusample.py``'s JSON lines as :class:`HostGpus`; anything else is one clean line."""

from __future__ import annotations

import json
from typing import Any

from servelab.engines.errors import ServelabError
from servelab.engines.gpus.inventory import GpuLockHolder, GpuProcess, GpuSample, HostGpus


class GpuSampleError(ServelabError):
    """The sampler's output could not be read (one line: what and where)."""


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _float(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _str(v: Any) -> str:
    return v if isinstance(v, str) else ""


def from_json(host: str, data: Any) -> HostGpus:
    """One decoded sample; GpuSampleError when it is not the sampler's shape."""
    if not isinstance(data, dict) or not isinstance(data.get("gpu"), bool):
        raise GpuSampleError(f"{host}: the GPU sampler's answer is not a sample: {str(data)[:80]!r}")
    if not data["gpu"]:
        return HostGpus(host=host, gpu=False, reason=_str(data.get("reason")) or "no GPU")
    gpus, procs, locks = data.get("gpus"), data.get("apps", []), data.get("locks", [])
    if not isinstance(gpus, list) or not isinstance(procs, list) or not isinstance(locks, list):
        raise GpuSampleError(f"{host}: the GPU sampler's answer has no GPU list")
    try:
        samples = tuple(
            GpuSample(
                index=int(g["index"]),
                uuid=str(g["uuid"]),
                name=_str(g.get("name")),
                memory_used_mib=_int(g.get("memory_used_mib")),
                memory_total_mib=_int(g.get("memory_total_mib")),
                util_pct=_int(g.get("util_pct")),
                power_w=_float(g.get("power_w")),
                temp_c=_int(g.get("temp_c")),
                pstate=_str(g.get("pstate")),
            )
            for g in gpus
        )
        processes = tuple(
            GpuProcess(
                pid=_int(p.get("pid")),
                name=_str(p.get("name")),
                gpu_uuid=str(p["gpu_uuid"]),
                used_mib=_int(p.get("used_mib")),
                pgid=_int(p.get("pgid")),
                run_id=p.get("run_id") if isinstance(p.get("run_id"), str) else None,
                cmd=p.get("cmd") if isinstance(p.get("cmd"), str) else None,
            )
            for p in procs
        )
        holders = tuple(
            GpuLockHolder(gpus=str(k["gpus"]), campaign=k.get("campaign"), pid=_int(k.get("pid")), since=k.get("since"))
            for k in locks
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise GpuSampleError(f"{host}: the GPU sampler's answer is malformed ({type(exc).__name__}: {exc})") from None
    t = _float(data.get("t")) or 0.0
    return HostGpus(host=host, gpu=True, t=t, gpus=samples, processes=processes, cpu_s=_float(data.get("cpu_s")) or 0.0, locks=holders)


def parse_line(host: str, line: str | bytes) -> HostGpus:
    """One JSON line of the sampler."""
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    try:
        data = json.loads(text)
    except ValueError:
        raise GpuSampleError(f"{host}: the GPU sampler printed something else than JSON: {text.strip()[:80]!r}") from None
    return from_json(host, data)


def parse_output(host: str, output: str | bytes) -> list[HostGpus]:
    """Every sample of the sampler's output (one JSON line each); a "no GPU" answer is a list of one."""
    text = output.decode("utf-8", "replace") if isinstance(output, bytes) else output
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise GpuSampleError(f"{host}: the GPU sampler printed nothing")
    return [parse_line(host, ln) for ln in lines]
