"""Host-side campaign supervisor: runs a campaign's queue on the host, detached, from its plan.

Uploaded to the host in a bundle with ``hostlib.py`` and run with the host's own Python (standard
library only, no servelab import), like ``runctl.py``. servelab (the laptop side, ``engines/campaign/control.py``) writes
``<workdir>/campaigns/<id>/plan.json`` and runs ``campaignctl.py start DIR``; from then on the
queue lives here, so closing the laptop, a dashboard or the SSH link does not pause it.

- ``start DIR``: start the supervisor detached (own session, stdin from /dev/null, output to
  ``supervisor.log``) unless one is already alive for DIR; it continues from ``state.json`` when
  there is one (that is ``resume``: finished points are skipped). Prints JSON.
- ``status DIR``: ``state.json`` plus whether the supervisor lives. Prints JSON.
- ``stop DIR GRACE``: SIGTERM to the verified supervisor (pid + start time + its command line),
  which stops its current run and records ``stopped``. Prints JSON.

The supervisor, per load: take the GPU-set lock (a second campaign on the same GPUs waits on it),
launch the load as an ordinary run through ``runctl.py start`` (so ``servelab runs`` shows it),
wait for ``/health`` and ``/v1/models`` (or the process gone: crashed), run each point's warm-up
and timed repeats through ``timed_client.py`` with the server's ``/metrics`` before and after each
repeat (saved to ``points/<point>.json``; servelab turns them into figures), then ``runctl stop``
(only that run's processes) and ``runctl cleanup --run`` (only the /dev/shm files that run
created). ``state.json`` is rewritten atomically after every step.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

if sys.path and sys.path[0] in ("", "."):
    del sys.path[0]  # never import from the working folder

if TYPE_CHECKING or __package__:  # imported by servelab (``servelab.engines.helpers.campaignctl``)
    from . import hostlib
else:  # run as a host script: its bundle's folder (or engines/helpers) is first on sys.path
    import hostlib

read_json = hostlib.read_json
write_json = hostlib.write_json

PLAN = "plan.json"
STATE = "state.json"
PID = "supervisor.pid"
LOG = "supervisor.log"
CHILD = "helper.pid"
POINTS = "points"
#: Point states that are final: resume never runs these again.
FINAL_POINT = ("done", "failed", "skipped", "blocked")
#: Load states that are final.
FINAL_LOAD = ("done", "crashed", "skipped", "refused")
POLL_S = 0.5
STOP_GRACE_S = 10.0


class Stopped(Exception):
    """SIGTERM reached the supervisor: stop the current run and record ``stopped``."""


# -- files -------------------------------------------------------------------------------------------
def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def log(msg: str) -> None:
    sys.stdout.write("%s %s\n" % (now_iso(), msg))
    sys.stdout.flush()


# -- /proc ---------------------------------------------------------------------------------------------
def proc_start_time(pid: int) -> int | None:
    st = hostlib.proc_stat(pid)
    if st is None or st[0] in ("Z", "X"):
        return None
    return st[3]


def proc_argv(pid: int) -> list[str]:
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return [p.decode("utf-8", "replace") for p in f.read().split(b"\0") if p]
    except OSError:
        return []


def supervisor_alive(camp_dir: str) -> dict[str, Any] | None:
    """The recorded supervisor when it is this very process (pid, start time, argv naming DIR)."""
    rec = read_json(os.path.join(camp_dir, PID))
    if not isinstance(rec, dict) or not rec.get("pid"):
        return None
    pid = int(rec["pid"])
    if proc_start_time(pid) != rec.get("start_time"):
        return None
    argv = proc_argv(pid)
    if os.path.abspath(camp_dir) not in [os.path.abspath(a) for a in argv[2:]]:
        return None
    return rec


# -- the state document ------------------------------------------------------------------------------
class State:
    """``state.json``: the campaign, each load and each point; saved after every change."""

    def __init__(self, camp_dir: str, plan: dict[str, Any]) -> None:
        self.path = os.path.join(camp_dir, STATE)
        old = read_json(self.path)
        if isinstance(old, dict) and old.get("id") == plan["id"]:
            self.data: dict[str, Any] = old
        else:
            self.data = {
                "id": plan["id"],
                "campaign": plan["campaign"],
                "created_at": now_iso(),
                "loads": [{"index": ld["index"], "status": "pending"} for ld in plan["loads"]],
                "points": {p["name"]: {"status": "pending", "load": p["load"]} for p in plan["points"]},
            }
        self.data["status"] = "running"
        self.data["supervisor_pid"] = os.getpid()
        self.data["current"] = None
        for p in self.data["points"].values():  # a point cut short by a kill is run again
            if p["status"] not in FINAL_POINT:
                p["status"] = "pending"
        self.save()

    def save(self) -> None:
        self.data["updated_at"] = now_iso()
        write_json(self.path, self.data)

    def load(self, index: int) -> dict[str, Any]:
        entry: dict[str, Any] = self.data["loads"][index]
        return entry

    def point(self, name: str) -> dict[str, Any]:
        entry: dict[str, Any] = self.data["points"][name]
        return entry

    def set_point(self, name: str, status: str, **extra: Any) -> None:
        p = self.point(name)
        p["status"] = status
        p.update(extra)
        self.save()

    def set_load(self, index: int, status: str, **extra: Any) -> None:
        ld = self.load(index)
        ld["status"] = status
        ld.update(extra)
        self.save()


# -- the GPU-set lock ----------------------------------------------------------------------------------
class GpuLock:
    """One campaign point at a time per GPU set: flock'd files in ``<workdir>/campaigns``.

    ``all`` (no CUDA_VISIBLE_DEVICES) takes ``gpus-all.lock`` exclusively; a set takes it shared
    plus ``gpu-<i>.lock`` exclusively per GPU, always in that order (no deadlock). A second
    campaign blocks here until the first releases: it waits, it is neither refused nor let in.
    """

    def __init__(self, lock_dir: str, gpus: str | None, holder: dict[str, Any]) -> None:
        self.lock_dir = lock_dir
        self.gpus = gpus
        self.holder = holder
        self.files: list[Any] = []

    def _take(self, name: str, mode: int) -> None:
        f = hostlib.open_lock(os.path.join(self.lock_dir, name))
        fcntl.flock(f.fileno(), mode)
        self.files.append(f)

    def acquire(self, on_wait: Any) -> None:
        hostlib.shared_dir(self.lock_dir)  # the host's GPU locks: every user's campaigns take them
        ids = sorted(int(g) for g in self.gpus.split(",") if g.strip().isdigit()) if self.gpus else None
        plan = [("gpus-all.lock", fcntl.LOCK_EX if ids is None else fcntl.LOCK_SH)] + [("gpu-%d.lock" % i, fcntl.LOCK_EX) for i in ids or []]
        for name, mode in plan:
            try:
                self._take(name, mode | fcntl.LOCK_NB)
            except BlockingIOError:
                on_wait(self.held_by())
                self._take(name, mode)
        holder = os.path.join(self.lock_dir, "gpus-holder-%s.json" % (self.gpus or "all").replace(",", "-"))
        write_json(holder, self.holder)

    def held_by(self) -> Any:
        return read_json(os.path.join(self.lock_dir, "gpus-holder-%s.json" % (self.gpus or "all").replace(",", "-")))

    def release(self) -> None:
        for f in reversed(self.files):
            f.close()
        self.files = []


# -- HTTP on the host (loopback) -------------------------------------------------------------------------
def http_get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return int(r.status), r.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), b""
    except (OSError, ValueError):
        return 0, b""


def http_post_json(url: str, body: dict[str, Any], timeout: float) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return int(r.status), r.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()[:300]
    except (OSError, ValueError) as exc:
        return 0, str(exc).encode()


def metrics_text(base: str) -> str | None:
    code, data = http_get(base + "/metrics")
    return data.decode("utf-8", "replace") if code == 200 else None


# -- the supervisor --------------------------------------------------------------------------------------
class Supervisor:
    def __init__(self, camp_dir: str) -> None:
        self.dir = os.path.abspath(camp_dir)
        plan = read_json(os.path.join(self.dir, PLAN))
        if not isinstance(plan, dict):
            raise SystemExit("no plan.json in %s" % self.dir)
        self.plan: dict[str, Any] = plan
        self.state = State(self.dir, plan)
        self.points = {p["name"]: p for p in plan["points"]}
        self.python = sys.executable
        self.child: subprocess.Popen[bytes] | None = None
        self.run_dir: str | None = None
        os.makedirs(os.path.join(self.dir, POINTS), exist_ok=True)
        self.end_orphan()

    def end_orphan(self) -> None:
        """A killed supervisor's last helper (a timed client still sending) would skew the rerun point: end it.

        Only that very process: same pid, same start time, same command line as recorded."""
        rec = read_json(os.path.join(self.dir, CHILD))
        if not isinstance(rec, dict) or not rec.get("pid"):
            return
        pid = int(rec["pid"])
        if proc_start_time(pid) == rec.get("start_time") and proc_argv(pid)[:2] == rec.get("argv"):
            try:
                os.kill(pid, signal.SIGKILL)
                log("ended helper %d left by the previous supervisor" % pid)
            except OSError:
                pass

    # host scripts
    def runctl(self, *args: str, timeout: float = 120.0) -> dict[str, Any]:
        argv = [self.python, self.plan["helpers"]["runctl"], *args]
        out = self._child(argv, None, timeout)
        return out

    def timed(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        return self._child([self.python, self.plan["helpers"]["timed_client"]], json.dumps(request).encode(), timeout)

    def _child(self, argv: list[str], data: bytes | None, timeout: float) -> dict[str, Any]:
        self.child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        write_json(os.path.join(self.dir, CHILD), {"pid": self.child.pid, "start_time": proc_start_time(self.child.pid), "argv": argv[:2]})
        try:
            out, err = self.child.communicate(data, timeout=timeout)
        except subprocess.TimeoutExpired:
            self.child.kill()
            self.child.wait()
            return {"error": "%s did not answer within %d s" % (os.path.basename(argv[1]), timeout)}
        finally:
            self.child = None
        value = hostlib.last_json(out)
        if value is not None:
            return value
        tail = [ln for ln in err.decode("utf-8", "replace").splitlines() if ln.strip()]
        return {"error": tail[-1] if tail else "no answer from %s" % os.path.basename(argv[1])}

    def on_term(self, _sig: int, _frame: Any) -> None:
        if self.child is not None and self.child.poll() is None:
            self.child.kill()
        raise Stopped()

    # the run of one load
    def run_state(self, run_dir: str) -> dict[str, Any]:
        answer = self.runctl("status", os.path.dirname(run_dir), os.path.basename(run_dir), timeout=60)
        runs = answer.get("runs") or []
        return runs[0] if runs else {"alive": False, "status": "missing", "exit_code": None}

    def ended_state(self, run_dir: str, st: dict[str, Any]) -> dict[str, Any]:
        """An engine just gone: its run's own supervisor writes the exit code a moment later; wait for it."""
        deadline = time.monotonic() + 5.0
        while not st.get("alive") and st.get("exit_code") is None and time.monotonic() < deadline:
            time.sleep(0.1)
            st = self.run_state(run_dir)
        return st

    def launch(self, load: dict[str, Any]) -> tuple[str | None, str | None]:
        """(run_dir, None) once started, (None, why) when runctl refused or failed."""
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        run_id = "%s-%s-%s" % (load["experiment"], stamp, secrets.token_hex(2))
        run_dir = os.path.join(self.plan["runs_root"], run_id)
        os.makedirs(run_dir)
        with open(os.path.join(run_dir, "experiment.toml"), "wb") as f:
            f.write(load["experiment_toml"].encode("utf-8"))
        rec = dict(load["record"])
        rec.update(id=run_id, run_dir=run_dir, log_path=os.path.join(run_dir, "engine.log"), started_at=now_iso(), campaign=self.plan["id"])
        write_json(os.path.join(run_dir, "run.json"), rec)
        answer = self.runctl("start", run_dir)
        if answer.get("refused"):
            return None, "refused: " + "; ".join(answer["refused"])
        if not answer.get("ok"):
            return None, str(answer.get("error") or "runctl start failed")
        return run_dir, None

    def wait_ready(self, load: dict[str, Any], run_dir: str) -> tuple[str | None, str | None]:
        """(served model, None) when ready; (None, why) when the process is gone or time ran out."""
        base = "http://127.0.0.1:%d" % load["record"]["port"]
        deadline = time.monotonic() + float(self.plan.get("ready_timeout_s", 1800))
        stage, last = "health", ""
        while time.monotonic() < deadline:
            st = self.run_state(run_dir)
            if not st.get("alive"):
                st = self.ended_state(run_dir, st)
                code = st.get("exit_code")
                if code is None:
                    return None, "engine gone before it was ready, without an exit code (%s)" % st.get("status")
                return None, "engine exited with code %s before it was ready" % code
            if stage == "health":
                code, _ = http_get(base + "/health", 5)
                if code == 200:
                    stage = "models"
                    continue
                last = "/health answered %s" % (code or "nothing")
            else:
                code, data = http_get(base + "/v1/models", 10)
                try:
                    model = str(json.loads(data.decode())["data"][0]["id"]) if code == 200 else None
                except (ValueError, KeyError, IndexError, TypeError):
                    model = None
                if model:
                    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0.0}
                    code, data = http_post_json(base + "/v1/chat/completions", body, 120)
                    if code == 200:
                        return model, None
                    last = "tiny generation answered %s: %s" % (code, data[:200].decode("utf-8", "replace"))
                else:
                    last = "/v1/models answered %s" % (code or "nothing")
            time.sleep(POLL_S)
        return None, "not ready after %s s (%s)" % (self.plan.get("ready_timeout_s", 1800), last)

    def stop_run(self, run_dir: str) -> None:
        st = self.run_state(run_dir)
        if st.get("alive"):
            self.runctl("stop", run_dir, "%g" % STOP_GRACE_S, timeout=STOP_GRACE_S + 60)
        self.runctl("cleanup", os.path.dirname(run_dir), "--apply", "--run", os.path.basename(run_dir), timeout=120)

    # one point
    def run_point(self, point: dict[str, Any], load: dict[str, Any], model: str) -> str | None:
        """Warm-up, then the timed repeats with /metrics around each; None when done, else why not."""
        base = "http://127.0.0.1:%d" % load["record"]["port"]
        probe = point["probe"]
        bodies = [dict(b, model=model) for b in point["bodies"]]
        timeout = float(point.get("timeout_s", 300))
        out: dict[str, Any] = {"point": point["name"], "run_dir": self.run_dir, "served_model": model, "started_at": now_iso(), "repeats": []}
        if probe["warmup"]:
            warm = [dict(bodies[i % len(bodies)], max_tokens=min(probe["max_tokens"], 32)) for i in range(probe["warmup"])]
            answer = self.timed({"url": base, "bodies": warm, "concurrency": 1, "timeout": timeout}, timeout * len(warm) + 60)
            bad = answer.get("error") or next((r.get("error") for r in answer.get("records") or [] if r and r.get("error")), None)
            if bad:
                return "warm-up failed: %s" % bad
        per_repeat_s = timeout * max(1, -(-len(bodies) // max(1, probe["concurrency"]))) + 60
        for rep in range(probe["repeats"]):
            before = metrics_text(base)
            answer = self.timed({"url": base, "bodies": bodies, "concurrency": probe["concurrency"], "timeout": timeout}, per_repeat_s)
            after = metrics_text(base) if before is not None else None
            if answer.get("error"):
                return "timed client: %s" % answer["error"]
            out["repeats"].append({"repeat": rep, "duration_s": answer.get("duration_s"), "records": answer.get("records"), "metrics_before": before, "metrics_after": after})
            records = answer.get("records") or []
            if records and all(r and r.get("error") for r in records):
                write_json(os.path.join(self.dir, POINTS, point["name"] + ".json"), out)
                return "every request failed: %s" % records[0]["error"]
        out["ended_at"] = now_iso()
        write_json(os.path.join(self.dir, POINTS, point["name"] + ".json"), out)
        return None

    def blocked_by(self, point: dict[str, Any]) -> str | None:
        ref = point.get("baseline_point")
        if not ref:
            return None
        st = self.state.data["points"].get(ref, {}).get("status")
        if st in ("failed", "skipped", "blocked"):
            return "baseline point %s %s" % (ref, st)
        return None

    # one load
    def run_load(self, load: dict[str, Any]) -> None:
        index = load["index"]
        ls = self.state.load(index)
        todo = [n for n in load["points"] if self.state.point(n)["status"] not in FINAL_POINT]
        if not todo:
            if ls["status"] not in FINAL_LOAD:
                self.state.set_load(index, "done")
            return
        if load.get("skip"):
            for name in todo:
                self.state.set_point(name, "skipped", error=load["skip"])
            self.state.set_load(index, "skipped", error=load["skip"])
            return
        runnable = []
        for name in todo:
            why = self.blocked_by(self.points[name])
            if why:
                self.state.set_point(name, "blocked", error=why)
            else:
                runnable.append(name)
        if not runnable:
            self.state.set_load(index, "done")
            return
        lock = GpuLock(self.plan["lock_dir"], load.get("gpus"), {"campaign": self.plan["id"], "pid": os.getpid(), "load": index, "since": now_iso()})

        def waiting(holder: Any) -> None:
            self.state.data["status"] = "waiting"
            self.state.data["waiting_for"] = holder
            self.state.save()
            log("load %d waits for the GPU set (held by %s)" % (index, holder))

        lock.acquire(waiting)
        try:
            self.state.data["status"] = "running"
            self.state.data.pop("waiting_for", None)
            self._run_load_locked(load, runnable)
        finally:
            lock.release()

    def _run_load_locked(self, load: dict[str, Any], runnable: list[str]) -> None:
        index = load["index"]
        ls = self.state.load(index)
        run_dir = ls.get("run_dir")
        if run_dir and not self.run_state(run_dir).get("alive"):
            run_dir = None  # the run of an interrupted load is gone: launch it again
        if run_dir is None:
            self.state.data["current"] = {"load": index, "point": None, "step": "launching"}
            t0 = time.time()
            run_dir, why = self.launch(load)
            if run_dir is None:
                for name in runnable:
                    self.state.set_point(name, "failed", error="load %d %s" % (index + 1, why))
                self.state.set_load(index, "refused", error=why)
                return
            self.state.set_load(index, "launching", run_dir=run_dir, run_id=os.path.basename(run_dir), launched_at=t0)
            log("load %d launched: %s" % (index, run_dir))
        self.run_dir = run_dir
        self.state.data["current"] = {"load": index, "point": None, "step": "loading"}
        model, why = self.wait_ready(load, run_dir)
        if model is None:
            st = self.ended_state(run_dir, self.run_state(run_dir))
            for name in runnable:
                self.state.set_point(name, "failed", error="load %d crashed: %s" % (index + 1, why))
            self.stop_run(run_dir)
            self.state.set_load(index, "crashed", error=why, exit_code=st.get("exit_code"))
            log("load %d crashed: %s" % (index, why))
            return
        ls = self.state.load(index)
        self.state.set_load(index, "ready", ready_at=time.time(), load_s=round(time.time() - float(ls.get("launched_at") or time.time()), 2), served_model=model)
        crashed = None
        for name in runnable:
            if crashed:
                self.state.set_point(name, "failed", error=crashed)
                continue
            self.state.data["current"] = {"load": index, "point": name, "step": "probing"}
            self.state.set_point(name, "running", started_at=now_iso())
            why = self.run_point(self.points[name], load, model)
            if why is None:
                self.state.set_point(name, "done", ended_at=now_iso(), result="%s/%s.json" % (POINTS, name))
            else:
                self.state.set_point(name, "failed", ended_at=now_iso(), error=why)
            if not self.run_state(run_dir).get("alive"):
                crashed = "load %d crashed during point %s" % (index + 1, name)
        self.state.data["current"] = {"load": index, "point": None, "step": "stopping"}
        self.stop_run(run_dir)
        self.state.set_load(index, "crashed" if crashed else "done", error=crashed, exit_code=self.run_state(run_dir).get("exit_code"))

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.on_term)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the SSH channel going away must not end the queue
        try:
            for load in self.plan["loads"]:
                self.run_load(load)
        except Stopped:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            log("stop requested")
            if self.run_dir and self.run_state(self.run_dir).get("alive"):
                self.stop_run(self.run_dir)
            for p in self.state.data["points"].values():
                if p["status"] == "running":
                    p["status"] = "pending"
            self.state.data["status"] = "stopped"
            self.state.data["current"] = None
            self.state.save()
            return 0
        except Exception as exc:  # recorded, so status can say why the queue ended
            self.state.data["status"] = "failed"
            self.state.data["error"] = "%s: %s" % (type(exc).__name__, exc)
            self.state.save()
            raise
        self.state.data["status"] = "done"
        self.state.data["current"] = None
        self.state.data["ended_at"] = now_iso()
        self.state.save()
        log("campaign done")
        return 0


# -- commands ----------------------------------------------------------------------------------------
def supervisor_main(camp_dir: str, w: int) -> int:
    """The detached supervisor (``hostlib.detach``'s grandchild): its output to the log, then the queue."""
    answered = False
    try:
        out = os.open(os.path.join(camp_dir, LOG), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = sys.stdout
        pid = os.getpid()
        write_json(os.path.join(camp_dir, PID), {"pid": pid, "pgid": os.getpgid(0), "start_time": proc_start_time(pid), "started_at": now_iso()})
        sup = Supervisor(camp_dir)
        hostlib.answer(w, {"ok": True, "pid": pid})
        answered = True
        log("supervisor %d started" % pid)
        return sup.run()
    except BaseException as exc:  # noqa: BLE001 - the log is the only witness
        import traceback

        traceback.print_exc()
        if not answered:
            hostlib.answer(w, {"ok": False, "error": "%s: %s" % (type(exc).__name__, exc)})
        return 1


def cmd_start(camp_dir: str) -> dict[str, Any]:
    if not os.path.isfile(os.path.join(camp_dir, PLAN)):
        return {"ok": False, "error": "no plan.json in %s" % camp_dir}
    lock = hostlib.open_lock(os.path.join(camp_dir, ".start.lock"))
    fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
    try:
        running = supervisor_alive(camp_dir)
        if running:
            return {"ok": False, "error": "the supervisor of %s is already running (pid %s)" % (os.path.basename(camp_dir), running["pid"])}
        reply = hostlib.detach(lambda w: supervisor_main(camp_dir, w), close=[lock])
    finally:
        lock.close()
    if not reply:
        return {"ok": False, "error": "the supervisor died before it started (see %s)" % os.path.join(camp_dir, LOG)}
    answer: dict[str, Any] = json.loads(reply.decode())
    return answer


def cmd_status(camp_dir: str) -> dict[str, Any]:
    # Liveness first, then the state: a supervisor that writes its last state and exits between the
    # two reads would otherwise be read as gone while its state still says running ("interrupted").
    sup = supervisor_alive(camp_dir)
    state = read_json(os.path.join(camp_dir, STATE))
    return {"ok": True, "state": state, "supervisor_alive": sup is not None, "supervisor": read_json(os.path.join(camp_dir, PID))}


def cmd_stop(camp_dir: str, grace: float) -> dict[str, Any]:
    sup = supervisor_alive(camp_dir)
    if sup is None:
        return {"ok": True, "was_running": False, "state": read_json(os.path.join(camp_dir, STATE))}
    os.kill(int(sup["pid"]), signal.SIGTERM)
    deadline = time.monotonic() + grace
    while supervisor_alive(camp_dir) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    left = supervisor_alive(camp_dir) is not None
    return {"ok": not left, "was_running": True, "remaining": left, "state": read_json(os.path.join(camp_dir, STATE))}


def main(argv: list[str]) -> int:
    return hostlib.run_command(argv, 3, "usage: campaignctl.py start|status|stop DIR [GRACE]", {
        "start": lambda a: cmd_start(a[2]),
        "status": lambda a: cmd_status(a[2]),
        "stop": lambda a: cmd_stop(a[2], float(a[3]) if len(a) > 3 else 60.0),
    })


if __name__ == "__main__":
    sys.exit(main(sys.argv))
