"""Host-side GPU sampler for servelab (standard library only, uploaded alone, imports no other helper).

``python gpusample.py [--interval S] [--count N]`` asks ``nvidia-smi`` (on every NVIDIA host; no NVML
bindings needed) what each GPU holds and prints one JSON line per sample:

    {"gpu": true, "t": 1764748800.12, "gpus": [{"index": 0, "uuid": "GPU-...", "name": "NVIDIA H200",
     "memory_used_mib": 10, "memory_total_mib": 143771, "util_pct": 0, "power_w": 75.3, "temp_c": 31,
     "pstate": "P0"}], "apps": [{"pid": 4242, "name": "python3", "gpu_uuid": "GPU-...", "used_mib": 10240,
     "pgid": 4242, "run_id": "r-...", "cmd": "python3 -m ..."}], "cpu_s": 0.004}

- once (the default, ``--count 1``) or every ``--interval`` seconds (``--count 0``: until stopped);
- each compute process is named as the host sees it: its process group, the servelab run marker
  (``SERVELAB_RUN_ID`` in its environment, readable for the same user) and its command line, so the
  core can tell this run's, another servelab run's and a foreign process apart without another call;
- ``cpu_s``: the CPU seconds this sample cost the host (the sampler and its nvidia-smi children);
- ``--locks DIR``: the campaigns' GPU-set locks held now, with the campaign holding each;
- a host without nvidia-smi, or whose nvidia-smi finds no GPU, gets a single
  ``{"gpu": false, "reason": "..."}`` line, and the sampler exits 0 (nothing more is sampled).

A watch (``--count`` other than 1, ``--interval`` of 0.1 s or more) reads one long-lived
``nvidia-smi --query-gpu=... -lms INTERVAL`` rather than starting nvidia-smi each second: NVML is
initialised once, which is most of a one-shot call's cost. The compute-process list is asked for when a GPU's used memory changed since the last sample, and
at least every ``--apps-every`` samples (10), so a quiet GPU costs one nvidia-smi call a sample.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

GPU_FIELDS = "index,uuid,name,memory.used,memory.total,utilization.gpu,power.draw,temperature.gpu,pstate"
APP_FIELDS = "pid,process_name,gpu_uuid,used_memory"
GPU_QUERY = ["--query-gpu=" + GPU_FIELDS, "--format=csv,noheader,nounits"]
APP_QUERY = ["--query-compute-apps=" + APP_FIELDS, "--format=csv,noheader,nounits"]
MARKER = "SERVELAB_RUN_ID"


class NoGpu(Exception):
    """nvidia-smi is missing or answers no GPU: the one "no GPU" answer."""


def smi(exe: str, args: list[str]) -> list[str]:
    try:
        out = subprocess.run([exe] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise NoGpu("nvidia-smi failed: %s" % exc) from None
    text = out.stdout.decode("utf-8", "replace")
    if out.returncode != 0:
        lines = [ln.strip() for ln in (out.stderr.decode("utf-8", "replace") + "\n" + text).splitlines() if ln.strip()]
        raise NoGpu(lines[0] if lines else "nvidia-smi exit code %d" % out.returncode)
    return [ln.strip() for ln in text.splitlines() if ln.strip()]


def number(text: str) -> float | None:
    """nvidia-smi's figure, None for ``[N/A]``, ``[Not Supported]``, ``N/A``..."""
    try:
        return float(text)
    except ValueError:
        return None


def whole(text: str) -> int | None:
    value = number(text)
    return None if value is None else int(value)


def parse_gpus(lines: list[str]) -> list[dict[str, Any]]:
    gpus = []
    for line in lines:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 9:
            continue
        # a GPU's name never holds a comma in nvidia-smi's list, but be safe: the name is what is left
        extra = len(parts) - 9
        name = ", ".join(parts[2 : 3 + extra])
        rest = parts[3 + extra :]
        gpus.append(
            {
                "index": whole(parts[0]),
                "uuid": parts[1],
                "name": name,
                "memory_used_mib": whole(rest[0]),
                "memory_total_mib": whole(rest[1]),
                "util_pct": whole(rest[2]),
                "power_w": number(rest[3]),
                "temp_c": whole(rest[4]),
                "pstate": rest[5],
            }
        )
    return gpus


def proc_facts(pid: int) -> dict[str, Any]:
    """The process group, servelab run marker and command line of ``pid`` as /proc shows them."""
    facts: dict[str, Any] = {"pgid": None, "run_id": None, "cmd": None}
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            stat = f.read().decode("utf-8", "replace")
        facts["pgid"] = int(stat[stat.rindex(")") + 2 :].split()[2])
    except (OSError, ValueError, IndexError):
        return facts
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            facts["cmd"] = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()[:300] or None
    except OSError:
        pass
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            for item in f.read().split(b"\0"):
                if item.startswith(MARKER.encode() + b"="):
                    facts["run_id"] = item.split(b"=", 1)[1].decode("utf-8", "replace")
                    break
    except OSError:
        pass
    return facts


def parse_apps(lines: list[str]) -> list[dict[str, Any]]:
    apps = []
    for line in lines:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4 or "no running" in line.lower():
            continue
        pid = whole(parts[0])
        app = {"pid": pid, "name": ", ".join(parts[1:-2]), "gpu_uuid": parts[-2], "used_mib": whole(parts[-1])}
        app.update(proc_facts(pid) if pid else {"pgid": None, "run_id": None, "cmd": None})
        apps.append(app)
    return apps


def held_locks(lock_dir: str) -> list[dict[str, Any]]:
    """The campaigns' GPU-set locks (``gpus-all.lock``, ``gpu-<i>.lock``) that are held now, each with
    the holder its campaign wrote (``gpus-holder-<set>.json``). A lock is held when a shared flock on
    it cannot be had at once; the probe is released at once (a campaign taking it waits microseconds)."""
    try:
        names = sorted(os.listdir(lock_dir))
    except OSError:
        return []
    import fcntl

    held = []
    for name in names:
        if not (name == "gpus-all.lock" or (name.startswith("gpu-") and name.endswith(".lock"))):
            continue
        try:
            with open(os.path.join(lock_dir, name), "rb") as f:
                try:
                    fcntl.flock(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    held.append(name)
        except OSError:
            continue
    out = []
    for name in held:
        gpu = "all" if name == "gpus-all.lock" else name[4:-5]
        holder: dict[str, Any] = {}
        for hname in names:
            parts = hname[len("gpus-holder-") : -len(".json")].split("-") if hname.startswith("gpus-holder-") else []
            if parts and (parts == ["all"] if gpu == "all" else gpu in parts):
                try:
                    with open(os.path.join(lock_dir, hname)) as f:
                        holder = json.load(f)
                except (OSError, ValueError):
                    holder = {}
                break
        out.append({"gpus": gpu, "campaign": holder.get("campaign"), "pid": holder.get("pid"), "since": holder.get("since")})
    return out


def cpu_seconds(loop_pid: int | None = None) -> float:
    """CPU seconds of this process, its finished children and the running nvidia-smi loop (if any)."""
    me = os.times()
    total = me.user + me.system + me.children_user + me.children_system
    if loop_pid:
        try:
            with open("/proc/%d/stat" % loop_pid, "rb") as f:
                stat = f.read().decode("utf-8", "replace")
            fields = stat[stat.rindex(")") + 2 :].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            pass
    return total


class Sampler:
    """Samples one at a time (one nvidia-smi call for the GPUs), or, with ``loop_ms``, reads the lines of
    one long-lived ``nvidia-smi -lms`` (NVML initialised once: a fraction of a one-shot call's cost)."""

    def __init__(self, exe: str, apps_every: int, loop_ms: int = 0, lock_dir: str | None = None) -> None:
        self.exe = exe
        self.lock_dir = lock_dir
        self.apps_every = max(1, apps_every)
        self.memory: list[Any] | None = None
        self.apps: list[dict[str, Any]] = []
        self.since_apps = 0
        self.loop: subprocess.Popen[bytes] | None = None
        self.count = 0
        self.last_cpu = 0.0
        if loop_ms:
            self.count = len(parse_gpus(smi(exe, GPU_QUERY)))
            if not self.count:
                raise NoGpu("nvidia-smi lists no GPU")
            self.loop = subprocess.Popen(
                [exe] + GPU_QUERY + ["-lms", str(loop_ms)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
            )
        self.last_cpu = cpu_seconds(self.loop.pid if self.loop else None)

    def gpu_lines(self) -> list[str]:
        if self.loop is None:
            return smi(self.exe, GPU_QUERY)
        assert self.loop.stdout is not None
        lines: list[str] = []
        while len(lines) < self.count:
            raw = self.loop.stdout.readline()
            if not raw:
                raise NoGpu("nvidia-smi's loop ended (exit code %s)" % self.loop.poll())
            if raw.strip():
                lines.append(raw.decode("utf-8", "replace").strip())
        return lines

    def sample(self) -> dict[str, Any]:
        lines = self.gpu_lines()
        t = time.time()
        gpus = parse_gpus(lines)
        if not gpus:
            raise NoGpu("nvidia-smi lists no GPU")
        memory = [(g["uuid"], g["memory_used_mib"]) for g in gpus]
        self.since_apps += 1
        if memory != self.memory or self.since_apps >= self.apps_every:
            self.apps = parse_apps(smi(self.exe, APP_QUERY))
            self.since_apps = 0
        self.memory = memory
        cpu = cpu_seconds(self.loop.pid if self.loop else None)
        cost, self.last_cpu = cpu - self.last_cpu, cpu
        out = {"gpu": True, "t": round(t, 3), "gpus": gpus, "apps": self.apps, "cpu_s": round(cost, 5)}
        if self.lock_dir:
            out["locks"] = held_locks(self.lock_dir)
        return out

    def close(self) -> None:
        if self.loop is not None and self.loop.poll() is None:
            self.loop.terminate()  # the sampler's own child, started above
            try:
                self.loop.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.loop.kill()
                self.loop.wait()


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpusample.py", description="Sample what each GPU holds, as JSON lines.")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between samples (default 1)")
    parser.add_argument("--count", type=int, default=1, help="samples to take, 0 for until stopped (default 1)")
    parser.add_argument("--apps-every", type=int, default=10, help="ask for compute processes at least every N samples")
    parser.add_argument("--locks", default=None, help="the campaigns' lock folder: report which GPU-set locks are held")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    exe = shutil.which("nvidia-smi")
    if exe is None:
        emit({"gpu": False, "reason": "no nvidia-smi on PATH"})
        return 0
    taken = 0
    sampler: Sampler | None = None
    try:
        # one sample, or a fast watch: one call a sample; a watch: one nvidia-smi loop (cheaper)
        loop_ms = int(args.interval * 1000) if args.count != 1 and args.interval >= 0.1 else 0
        sampler = Sampler(exe, args.apps_every, loop_ms, args.locks)
        while True:
            began = time.monotonic()
            emit(sampler.sample())
            taken += 1
            if args.count and taken >= args.count:
                return 0
            if not loop_ms:
                time.sleep(max(0.0, args.interval - (time.monotonic() - began)))
    except NoGpu as exc:
        if taken:  # a GPU that vanished mid-watch (driver reset, nvidia-smi broke): say why, once
            emit({"gpu": False, "reason": str(exc), "after": taken})
            return 1
        emit({"gpu": False, "reason": str(exc)})
        return 0
    except (KeyboardInterrupt, BrokenPipeError):
        return 0
    finally:
        if sampler is not None:
            sampler.close()

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
