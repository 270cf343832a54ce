"""Host-side run control for servelab: start, inspect and stop engine runs.

This file is uploaded to each host in a bundle with ``hostlib.py`` (``engines/hosts/scripts.py``) and
run with the host's own Python (standard library only, no servelab import), so that every decision about a process is taken on the machine where the process
lives, in one round trip, with no shell involved:

- ``start RUN_DIR``: under a host-wide lock, refuse when the port or the GPUs are held (saying by
  whom), else start the engine detached (own session and process group, stdin from /dev/null,
  stdout+stderr to engine.log) under a small supervisor that records the exit code. Prints JSON.
- ``status RUNS_ROOT [RUN_ID...]``: every run's record plus liveness (pid + start time + the
  ``SERVELAB_RUN_ID`` marker in the environment guard against pid reuse). Prints JSON.
- ``stop RUN_DIR GRACE [--leader-first]``: SIGTERM to the run's process group, SIGKILL after GRACE
  seconds; only processes carrying this run's marker are ever signalled. ``--leader-first``: SIGTERM
  to the leader alone first, for a daemon that stops its own children in order (``ray start
  --block``: ~1-3 s that way, over 20 s when its children are signalled with it). Prints JSON.
- ``cleanup RUNS_ROOT [--apply] [--run RUN_ID]``: leftover processes of finished runs (or of that
  one run) and the shared-memory files they left in /dev/shm: only files the run's own processes
  were seen holding while it ran (the supervisor samples them), never another program's or another
  user's. Prints JSON (what would be / was removed).
- ``holders PORT``: who listens on a port. Prints JSON.
- ``free-port RUNS_ROOT FROM``: the first port above FROM that nothing listens on and no live
  servelab run of the folder was given (a rehearsal's own port beside a live run). Prints JSON.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING or __package__:  # imported by servelab (``servelab.engines.helpers.runctl``)
    from . import hostlib
else:  # run as a host script: its bundle's folder (or engines/helpers) is first on sys.path
    import hostlib

read_json = hostlib.read_json
write_atomic = hostlib.write_atomic
proc_stat = hostlib.proc_stat

MARKER = "SERVELAB_RUN_ID"
RUN_JSON = "run.json"
LOG = "engine.log"
EXIT_CODE = "exit_code"
STOP_REQUESTED = "stop_requested"
#: /dev/shm files a run's own processes were seen holding (open or mapped) while it ran.
SHM_OWNED = "shm-owned.json"
#: How often the supervisor looks at what the run's processes hold in /dev/shm.
SHM_SAMPLE_S = 1.0
SHM_DIR = "/dev/shm"
#: How often the supervisor asks nvidia-smi what the run's own processes hold (one call, ~25 ms of
#: CPU on an H200 host: 0.5 % of a core at 5 s). SERVELAB_GPU_SAMPLE_S overrides it.
GPU_SAMPLE_S = 5.0


# -- run files -------------------------------------------------------------------------------------
def update_record(run_dir: str, **fields: Any) -> dict[str, Any]:
    path = os.path.join(run_dir, RUN_JSON)
    rec = read_json(path) or {}
    rec.update(fields)
    hostlib.write_json(path, rec, indent=2)
    return rec


def stop_signal_of(data: bytes) -> str:
    """The signal a ``stop_requested`` file names: its first word (``SIGTERM 1733300000.1``); a file
    written before it named one (a bare time, or empty) stands for the SIGTERM every stop starts with."""
    words = data.split()
    first = words[0].decode("ascii", "replace") if words else ""
    return first if first.startswith("SIG") else "SIGTERM"


def read_stop_signal(run_dir: str) -> str | None:
    """The last signal servelab's stop sent this run, or None when no stop was asked for."""
    try:
        with open(os.path.join(run_dir, STOP_REQUESTED), "rb") as f:
            return stop_signal_of(f.read())
    except OSError:
        return None


def note_stop(run_dir: str, sig: str) -> None:
    """Record that servelab asked the run to stop, and with which signal (the last one sent)."""
    write_atomic(os.path.join(run_dir, STOP_REQUESTED), ("%s %f\n" % (sig, time.time())).encode())


def read_exit_code(run_dir: str) -> int | None:
    try:
        with open(os.path.join(run_dir, EXIT_CODE), "rb") as f:
            return int(f.read().strip() or b"0")
    except (OSError, ValueError):
        return None


# -- /proc ------------------------------------------------------------------------------------------
def has_marker(pid: int, run_id: str) -> bool:
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            env = f.read()
    except OSError:
        return False
    return ("%s=%s" % (MARKER, run_id)).encode() in env.split(b"\0")


def cmdline(pid: int) -> str:
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            parts = f.read().split(b"\0")
    except OSError:
        return "?"
    return " ".join(p.decode("utf-8", "replace") for p in parts if p)[:300]


def all_pids() -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            out.append(int(name))
    return out


def alive(pid: int | None, start_time: int | None) -> bool:
    """True when ``pid`` is the very process recorded (same start time) and is not a zombie."""
    if not pid:
        return False
    st = proc_stat(pid)
    if st is None or st[0] in ("Z", "X"):
        return False
    return start_time is None or st[3] == start_time


def members(run_id: str) -> list[int]:
    """Live processes carrying this run's marker (the engine and everything it spawned)."""
    out = []
    me = os.getpid()
    for pid in all_pids():
        if pid == me:
            continue
        st = proc_stat(pid)
        if st is None or st[0] in ("Z", "X"):
            continue
        if has_marker(pid, run_id):
            out.append(pid)
    return out


# -- who holds a port / GPUs --------------------------------------------------------------------------
def listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) < 10 or parts[3] != "0A":
                continue
            if int(parts[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(parts[9])
    return inodes


def port_holders(port: int) -> list[tuple[int | None, str]]:
    """[(pid or None, command)] of processes listening on ``port``."""
    inodes = listening_inodes(port)
    if not inodes:
        return []
    found: list[tuple[int | None, str]] = []
    wanted = set("socket:[%s]" % i for i in inodes)
    for pid in all_pids():
        fd_dir = "/proc/%d/fd" % pid
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target in wanted:
                found.append((pid, cmdline(pid)))
                break
    return found or [(None, "a process this user cannot see")]


def nvidia_smi(args: list[str]) -> list[str] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe] + args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return [line.strip() for line in out.stdout.decode("utf-8", "replace").splitlines() if line.strip()]


def gpu_busy(wanted: set[int] | None) -> tuple[int, list[tuple[int, int | None, str]]]:
    """(gpu count, [(gpu index, pid, command)]) of compute processes on the wanted GPUs (None: all)."""
    gpus = nvidia_smi(["--query-gpu=index,uuid", "--format=csv,noheader"])
    if not gpus:
        return 0, []
    by_uuid: dict[str, int] = {}
    for line in gpus:
        index, uuid = [p.strip() for p in line.split(",", 1)]
        by_uuid[uuid] = int(index)
    apps = nvidia_smi(["--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader"]) or []
    busy: list[tuple[int, int | None, str]] = []
    for line in apps:
        pid_s, gpu = [p.strip() for p in line.split(",", 1)]
        idx = by_uuid.get(gpu)
        if idx is None or (wanted is not None and idx not in wanted):
            continue
        pid = int(pid_s) if pid_s.isdigit() else None
        busy.append((idx, pid, cmdline(pid) if pid else "?"))
    return len(by_uuid), busy


class GpuPeak:
    """The run's own GPU memory, sampled by its supervisor for the record: the peak per GPU
    (``gpu_peak_mib``, MiB by GPU index, the sum over the run's processes) and the seconds from the
    engine's start to its first allocation (``gpu_first_alloc_s``). A host without nvidia-smi, or
    with no GPU, is asked once and never again."""

    def __init__(self, run_dir: str, run_id: str, started: float, pgid: int | None = None) -> None:
        self.run_dir, self.run_id, self.started, self.pgid = run_dir, run_id, started, pgid  # its marker or its group
        try:
            self.every = float(os.environ.get("SERVELAB_GPU_SAMPLE_S") or GPU_SAMPLE_S)
        except ValueError:
            self.every = GPU_SAMPLE_S
        self.next_t = 0.0
        self.by_uuid: dict[str, int] | None = None
        self.off = False
        self.peak: dict[int, int] = {}
        self.first: float | None = None

    def sample(self, now: float) -> None:
        if self.off or now < self.next_t:
            return
        self.next_t = now + self.every
        if self.by_uuid is None:
            gpus = nvidia_smi(["--query-gpu=index,uuid", "--format=csv,noheader"])
            if not gpus:
                self.off = True
                return
            self.by_uuid = {}
            for line in gpus:
                index, _, uuid = [p.strip() for p in line.partition(",")]
                if index.isdigit():
                    self.by_uuid[uuid] = int(index)
        mine: dict[int, int] = {}
        for line in nvidia_smi(["--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"]) or []:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) != 3 or not parts[0].isdigit() or not parts[2].isdigit() or parts[1] not in self.by_uuid:
                continue
            if has_marker(int(parts[0]), self.run_id) or hostlib.in_group(int(parts[0]), self.pgid):
                idx = self.by_uuid[parts[1]]
                mine[idx] = mine.get(idx, 0) + int(parts[2])
        changed = False
        for idx, mib in mine.items():
            if mib > self.peak.get(idx, -1):
                self.peak[idx] = mib
                changed = True
        if self.first is None and any(mine.values()):
            self.first = round(max(0.0, now - self.started), 1)
            changed = True
        if changed:
            # two writers (the supervisor's samples, the stop's last one): the record only ever rises
            rec = read_json(os.path.join(self.run_dir, RUN_JSON)) or {}
            for key, mib in (rec.get("gpu_peak_mib") or {}).items():
                if str(key).isdigit() and isinstance(mib, int) and mib > self.peak.get(int(key), -1):
                    self.peak[int(key)] = mib
            if isinstance(rec.get("gpu_first_alloc_s"), (int, float)):
                self.first = rec["gpu_first_alloc_s"] if self.first is None else min(self.first, rec["gpu_first_alloc_s"])
            update_record(self.run_dir, gpu_peak_mib={str(k): v for k, v in sorted(self.peak.items())}, gpu_first_alloc_s=self.first)


def last_gpu_sample(run_dir: str, rec: dict[str, Any]) -> None:
    """One GPU sample for the record just before a stop signals the run: the supervisor samples every
    ``GPU_SAMPLE_S``, so a run stopped between two samples would keep a peak from before its last
    allocations (seen on the H200: 4708 MiB recorded of 8804)."""
    started = rec.get("started_epoch")
    peak = GpuPeak(run_dir, rec["id"], float(started) if isinstance(started, (int, float)) else time.time(), rec.get("pgid"))
    try:
        peak.sample(time.time())
    except (OSError, ValueError):
        pass


def gpus_of(rec: dict[str, Any]) -> set[int] | None:
    """GPU indices a run uses (from CUDA_VISIBLE_DEVICES), None for all."""
    value = (rec.get("env") or {}).get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    return set(int(v) for v in value.split(",") if v.strip().isdigit())


def overlaps(a: set[int] | None, b: set[int] | None) -> bool:
    return a is None or b is None or bool(a & b)


# -- run records ----------------------------------------------------------------------------------------
def run_state(run_dir: str) -> dict[str, Any] | None:
    rec: dict[str, Any] | None = read_json(os.path.join(run_dir, RUN_JSON))
    if rec is None:
        return None
    code = read_exit_code(run_dir)
    is_alive = code is None and alive(rec.get("pid"), rec.get("start_time"))
    stop_signal = read_stop_signal(run_dir)
    rec["stop_signal"] = stop_signal
    if is_alive:
        status = "running"
    elif code is not None:
        status = "stopped" if stop_signal is not None else "exited"
    elif rec.get("pid"):  # its supervisor alive is about to write the exit code: not lost, still ending
        status = "running" if alive(rec.get("supervisor_pid"), None) else "lost"
    else:
        status = rec.get("status") or "launching"
    rec["alive"] = is_alive
    rec["exit_code"] = code
    rec["status"] = status
    return rec


def run_dirs(root: str) -> list[str]:
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    return [os.path.join(root, n) for n in names if os.path.isfile(os.path.join(root, n, RUN_JSON))]


def cmd_status(root: str, ids: list[str]) -> dict[str, Any]:
    out = []
    for run_dir in run_dirs(root):
        if ids and os.path.basename(run_dir) not in ids:
            continue
        state = run_state(run_dir)
        if state is not None:
            out.append(state)
    return {"runs": out}


# -- start --------------------------------------------------------------------------------------------------
def refusals(run_dir: str, rec: dict[str, Any]) -> list[str]:
    """Why this run may not start now: the port or its GPUs are held by someone else."""
    reasons = []
    port = rec.get("port")
    if port:
        for pid, cmd in port_holders(int(port)):
            reasons.append("port %s is in use by %s: %s" % (port, "pid %d" % pid if pid else "another user", cmd))
    wanted = gpus_of(rec)
    count, busy = gpu_busy(wanted)
    for idx, pid, cmd in busy:
        reasons.append("GPU %d is busy with pid %s: %s" % (idx, pid, cmd))
    root = os.path.dirname(run_dir)
    for other_dir in run_dirs(root):
        if os.path.abspath(other_dir) == os.path.abspath(run_dir):
            continue
        other = run_state(other_dir)
        if other is None or not other["alive"]:
            continue
        if port and other.get("port") == port:
            reasons.append("port %s belongs to servelab run %s (pid %s)" % (port, other.get("id"), other.get("pid")))
        elif count and overlaps(wanted, gpus_of(other)):
            reasons.append("GPUs overlap with servelab run %s (pid %s)" % (other.get("id"), other.get("pid")))
    return reasons


def shm_names() -> list[str]:
    try:
        return sorted(os.listdir(SHM_DIR))
    except OSError:
        return []


def supervise(run_dir: str, rec: dict[str, Any], report_fd: int) -> int:
    """The detached supervisor: start the engine, report its identity, wait, record its exit code."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    log_path = os.path.join(run_dir, LOG)
    env = dict(os.environ)
    env.update(rec.get("env") or {})
    env[MARKER] = rec["id"]
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the SSH channel going away must not end the supervisor
    started_local = time.strftime("%Y-%m-%d %H:%M:%S")  # the engine log's clock: where "load" starts
    try:
        log = open(log_path, "ab", buffering=0)
        proc = subprocess.Popen(
            rec["argv"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=rec.get("cwd") or run_dir,
            start_new_session=True,
            close_fds=True,
            restore_signals=True,
            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
        )
        log.close()
    except OSError as exc:
        with open(log_path, "ab") as f:
            f.write(("servelab: cannot start %s: %s\n" % (rec["argv"][0] if rec.get("argv") else "?", exc.strerror or exc)).encode())
        write_atomic(os.path.join(run_dir, EXIT_CODE), b"127\n")
        hostlib.answer(report_fd, {"ok": False, "error": "cannot start %s: %s" % (rec["argv"][0], exc.strerror or exc)})
        return 127
    st = proc_stat(proc.pid)
    started = update_record(
        run_dir,
        pid=proc.pid,
        pgid=proc.pid,
        start_time=st[3] if st else None,
        supervisor_pid=os.getpid(),
        status="running",
        started_local=started_local,
        started_epoch=round(time.time(), 3),  # the stop's last GPU sample counts the first allocation from here
    )
    hostlib.answer(report_fd, {"ok": True, "record": started})
    owned: set[str] = set()
    gpu, prefixes = GpuPeak(run_dir, rec["id"], time.time(), proc.pid), hostlib.shm_prefixes(rec)
    while True:
        try:
            note_owned_shm(run_dir, proc.pid, owned, prefixes)
        except OSError:
            pass
        try:
            gpu.sample(time.time())
        except (OSError, ValueError):
            pass
        try:
            code = proc.wait(timeout=SHM_SAMPLE_S)
            break
        except subprocess.TimeoutExpired:
            continue
    write_atomic(os.path.join(run_dir, EXIT_CODE), ("%d\n" % code).encode())
    stopped = os.path.exists(os.path.join(run_dir, STOP_REQUESTED))
    update_record(run_dir, status="stopped" if stopped else "exited", exit_code=code)
    return 0


def cmd_start(run_dir: str) -> dict[str, Any]:
    rec = read_json(os.path.join(run_dir, RUN_JSON))
    if rec is None:
        return {"ok": False, "error": "no run.json in %s" % run_dir}
    root = os.path.dirname(os.path.abspath(run_dir))
    lock = hostlib.open_lock(os.path.join(root, ".launch.lock"))  # runs/ is every user's: so is its lock
    fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
    try:
        reasons = refusals(run_dir, rec)
        if reasons:
            shutil.rmtree(run_dir, ignore_errors=True)  # nothing ran: leave no run behind
            return {"ok": False, "refused": reasons}
        reply = hostlib.detach(lambda w: supervise(run_dir, rec, w), close=[lock])
    finally:
        lock.close()
    if not reply:
        return {"ok": False, "error": "the supervisor died before starting the engine"}
    answer: dict[str, Any] = json.loads(reply.decode())
    return answer


# -- stop -----------------------------------------------------------------------------------------------------
def signal_run(rec: dict[str, Any], sig: int) -> list[int]:
    """Signal the run's group (when its leader is verified) and every other process with its marker."""
    run_id = rec["id"]
    done = []
    pgid = rec.get("pgid")
    if pgid and alive(rec.get("pid"), rec.get("start_time")) and has_marker(rec["pid"], run_id):
        try:
            os.killpg(pgid, sig)
            done.append(pgid)
        except OSError as exc:
            if exc.errno != errno.ESRCH:
                raise
    for pid in members(run_id):
        st = proc_stat(pid)
        if st is not None and pgid and st[1] == pgid and done:
            continue  # already reached through the group
        try:
            os.kill(pid, sig)
            done.append(pid)
        except OSError:
            pass
    return done


def cmd_stop(run_dir: str, grace: float, leader_first: bool = False) -> dict[str, Any]:
    rec = read_json(os.path.join(run_dir, RUN_JSON))
    if rec is None:
        return {"ok": False, "error": "no run.json in %s" % run_dir}
    if not rec.get("pid"):
        return {"ok": False, "error": "run %s has no process recorded" % rec.get("id")}
    asked = read_exit_code(run_dir) is None  # an engine that already exited was not stopped by us
    if asked:
        last_gpu_sample(run_dir, rec)
        note_stop(run_dir, "SIGTERM")
    before = members(rec["id"])
    deadline = time.monotonic() + grace
    # What the run's processes hold in /dev/shm is noted while they die too: what an engine makes
    # during its shutdown (a semaphore of a child it then kills) goes with the run's cleanup below.
    owned: set[str] = set()
    prefixes = hostlib.shm_prefixes(rec)
    def note() -> None:
        try:
            note_owned_shm(run_dir, rec.get("pgid") or rec["pid"], owned, prefixes)
        except OSError:
            pass
    note()
    if leader_first and alive(rec.get("pid"), rec.get("start_time")) and has_marker(rec["pid"], rec["id"]):
        try:
            os.kill(rec["pid"], signal.SIGTERM)
        except OSError:
            pass
        half = time.monotonic() + grace / 2
        while members(rec["id"]) and time.monotonic() < half:
            note()
            time.sleep(0.05)
    signal_run(rec, signal.SIGTERM)
    left = members(rec["id"])
    while left and time.monotonic() < deadline:
        note()
        time.sleep(0.05)
        left = members(rec["id"])
    killed = []
    if left:
        killed = left
        if asked:
            note_stop(run_dir, "SIGKILL")
        signal_run(rec, signal.SIGKILL)
        end = time.monotonic() + 5
        while left and time.monotonic() < end:
            time.sleep(0.05)
            left = members(rec["id"])
    # Give the supervisor a moment to record the exit code.
    end = time.monotonic() + 2
    while read_exit_code(run_dir) is None and time.monotonic() < end:
        if not alive(rec.get("supervisor_pid"), None):
            break
        time.sleep(0.05)
    # The run's own leftovers go with it: its /dev/shm files (only those its processes were seen
    # holding, none another live process holds), so `servelab cleanup` never finds them later.
    cleaned: dict[str, Any] = {"shm": []}
    if not left and read_exit_code(run_dir) is not None:
        cleaned = cmd_cleanup(os.path.dirname(os.path.abspath(run_dir)), True, only=os.path.basename(os.path.abspath(run_dir)))
    return {"ok": not left, "terminated": before, "killed": killed, "remaining": left, "cleaned": cleaned["shm"], "state": run_state(run_dir)}


# -- cleanup ----------------------------------------------------------------------------------------------------
def shm_held(pids: list[int]) -> set[str]:
    """Paths under /dev/shm that these processes have open or mapped."""
    used = set()
    for pid in pids:
        fd_dir = "/proc/%d/fd" % pid
        try:
            for fd in os.listdir(fd_dir):
                try:
                    target = os.readlink(os.path.join(fd_dir, fd))
                except OSError:
                    continue
                if target.startswith(SHM_DIR + "/"):
                    used.add(target)
        except OSError:
            pass
        try:
            with open("/proc/%d/maps" % pid, "rb") as f:
                for line in f:
                    i = line.find(b" " + SHM_DIR.encode() + b"/")
                    if i >= 0:
                        used.add(line[i + 1 :].strip().decode("utf-8", "replace").replace(" (deleted)", ""))
        except OSError:
            pass
    return used


def shm_in_use() -> set[str]:
    """Paths under /dev/shm that any live process has open or mapped."""
    return shm_held(all_pids())


def session_pids(sid: int) -> list[int]:
    """Live processes of a session: a run's engine and every child that did not leave it (SGLang's
    children rename themselves, which hides the marker but not the session)."""
    out = []
    for pid in all_pids():
        st = proc_stat(pid)
        if st is not None and st[0] not in ("Z", "X") and st[2] == sid:
            out.append(pid)
    return out


def note_owned_shm(run_dir: str, sid: int, owned: set[str], prefixes: tuple[str, ...]) -> None:
    """Add what the run's processes hold in /dev/shm now to ``shm-owned.json`` (only when it grew); the
    supervisor samples while the run lives, the stop while it dies: neither drops the other's."""
    held = {p for p in shm_held(session_pids(sid)) if os.path.basename(p).startswith(prefixes)}
    if not held <= owned:
        owned |= held
        owned |= set(read_json(os.path.join(run_dir, SHM_OWNED)) or [])
        write_atomic(os.path.join(run_dir, SHM_OWNED), json.dumps(sorted(owned)).encode())


def cmd_cleanup(root: str, apply: bool, only: str | None = None) -> dict[str, Any]:
    """Stale leftovers of servelab runs only: marked processes of finished runs, their /dev/shm files.

    ``only``: that one run's leftovers (what a campaign cleans after each load)."""
    processes = []
    shm = []
    ended = []
    for run_dir in run_dirs(root):
        if only is not None and os.path.basename(run_dir) != only:
            continue
        state = run_state(run_dir)
        if state is None or state["alive"] or not state.get("pid"):
            continue
        ended.append((run_dir, state))
        for pid in members(state["id"]):
            processes.append({"run": state["id"], "pid": pid, "command": cmdline(pid)})
    # Only files this run's own processes were seen holding: on a shared host another user's
    # engine makes files in /dev/shm at the same time, and those are never ours to remove.
    names = set(shm_names())
    # Held by a live process other than the leftovers about to be killed (listed first, so a file
    # made meanwhile and held is never claimed).
    doomed = {p["pid"] for p in processes}
    used = shm_held([pid for pid in all_pids() if pid not in doomed])
    claimed = set()
    for run_dir, state in ended:
        owned, prefixes = read_json(os.path.join(run_dir, SHM_OWNED)) or [], hostlib.shm_prefixes(state)
        for path in owned:
            name = os.path.basename(path)
            if os.path.dirname(path) != SHM_DIR or name not in names or not name.startswith(prefixes):
                continue
            if path in used or path in claimed:
                continue
            claimed.add(path)
            shm.append({"run": state["id"], "path": path})
    if apply:
        for p in processes:
            if has_marker(p["pid"], p["run"]):
                try:
                    os.kill(p["pid"], signal.SIGKILL)
                except OSError:
                    pass
        for s in shm:
            try:
                os.unlink(s["path"])
            except OSError:
                pass
        for run_dir, state in ended:
            if state["status"] == "lost":
                update_record(run_dir, status="lost")
    return {"processes": processes, "shm": shm, "applied": apply}


def free_port(root: str, start: int, tries: int = 200) -> dict[str, Any]:
    """The first port above ``start`` that nothing listens on and no live run of ``root`` holds."""
    taken = set()
    for run_dir in run_dirs(root):
        state = run_state(run_dir)
        if state is not None and state["alive"] and state.get("port"):
            taken.add(int(state["port"]))
    for port in range(start + 1, min(start + 1 + tries, 65536)):
        if port not in taken and not listening_inodes(port):
            return {"port": port}
    return {"error": "no free port in %d..%d" % (start + 1, start + tries)}


def main(argv: list[str]) -> int:
    return hostlib.run_command(argv, 2, "usage: runctl.py start|status|stop|cleanup|holders|free-port ...", {
        "start": lambda a: cmd_start(a[2]),
        "status": lambda a: cmd_status(a[2], a[3:]),
        "stop": lambda a: cmd_stop(a[2], float(a[3]), "--leader-first" in a[4:]),
        "cleanup": _cleanup,
        "holders": lambda a: {"holders": [{"pid": p, "command": c} for p, c in port_holders(int(a[2]))]},
        "free-port": lambda a: free_port(a[2], int(a[3])),
    })


def _cleanup(argv: list[str]) -> dict[str, Any]:
    rest = argv[3:]
    only = rest[rest.index("--run") + 1] if "--run" in rest[:-1] else None
    return cmd_cleanup(argv[2], "--apply" in rest, only)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
