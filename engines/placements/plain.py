"""A plain host: servelab's supervisor (``helpers/runctl.py``) starts the engine as a detached process
group on the machine itself, and every decision about a process (a held port, busy GPUs, liveness,
signalling only what the run started) is taken there in one round trip."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from servelab.engines.adapters.base import get_adapter
from servelab.engines.adapters.exchange import StopPlan
from servelab.engines.errors import ServelabError
from servelab.engines.helpers import run_script
from servelab.engines.helpers.runctl import STOP_REQUESTED, stop_signal_of
from servelab.engines.hosts.base import Host
from servelab.engines.runs.records import EXIT_CODE, RunRecord, RunStatus
from servelab.engines.runs.state import RunState

if TYPE_CHECKING:
    from servelab.engines.adapters.exchange import LaunchSpec
    from servelab.engines.hosts.hostsfile import HostConfig
    from servelab.engines.placements.base import Preview
    from servelab.engines.catalog.experiment import SourcedExperiment
    from servelab.engines.catalog.folder import Catalog
    from servelab.engines.runs.placed import JobView


async def runctl(host: Host, *args: str, timeout: float = 60.0) -> dict[str, Any]:
    """Run a runctl.py command on the host with the host's Python (a host script); its JSON answer."""
    done = await run_script(host, host.config.python, "runctl.py", *args, timeout=timeout)
    if not done.ok:
        err = done.stderr.decode("utf-8", "replace").strip().splitlines()
        why = err[-1] if err else f"exit code {done.exit_code}"
        if done.exit_code == 127:
            why = f"cannot run the host's python {host.config.python!r} ({why})"
        raise ServelabError(f"{host.name}: run control failed: {why}")
    try:
        data: dict[str, Any] = json.loads(done.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise ServelabError(f"{host.name}: run control gave no answer (stdout: {done.text()[:200]!r})") from None
    return data


async def exit_code(h: Host, rec: RunRecord) -> int | None:
    """The code the run's supervisor wrote when the engine exited (None: not yet, or never)."""
    try:
        return int((await h.read_bytes(f"{rec.run_dir}/{EXIT_CODE}")).strip() or b"0")
    except (FileNotFoundError, ValueError):
        return None


async def process_alive(h: Host, pid: int, start_time: int | None) -> bool:
    """The process exists on the host, is not a zombie, and (when known) started when recorded."""
    try:
        stat = (await h.read_bytes(f"/proc/{pid}/stat")).decode("utf-8", "replace")
    except (FileNotFoundError, OSError):
        return False
    rest = stat[stat.rfind(")") + 2 :].split()
    return bool(rest) and rest[0] not in ("Z", "X") and (start_time is None or (len(rest) > 19 and int(rest[19]) == start_time))


class PlainPlacement:
    """A run as a process group its supervisor started on the host."""

    kind = "plain"
    rehearsal_port_of_its_own = True

    async def start(self, h: Host, rec: RunRecord, exp: SourcedExperiment, catalog: Catalog, *, rehearsal: bool) -> RunRecord:
        answer = await runctl(h, "start", rec.run_dir)
        if answer.get("refused"):
            raise ServelabError(f"cannot launch {exp.name} on {h.name}: " + "; ".join(answer["refused"]))
        if not answer.get("ok"):
            raise ServelabError(f"cannot launch {exp.name} on {h.name}: {answer.get('error', 'unknown error')}")
        return RunRecord.from_json(answer["record"])

    def may_change(self, rec: RunRecord) -> bool:
        return False  # runctl's status already read the process

    async def liveness(self, h: Host, rec: RunRecord) -> tuple[bool, int | None]:
        """Only file reads (``/proc`` and the run folder): no command runs on the host."""
        code = await exit_code(h, rec)
        alive = bool(code is None and rec.pid and await process_alive(h, rec.pid, rec.start_time))
        supervised = False
        if not alive and code is None and rec.pid:
            # the engine is gone and no exit code yet: its supervisor, alive, is about to write it
            # (a stop's last instant reads "running", never a transient "lost"); one seen gone has
            # written whatever it would, maybe between the two reads: the code is read again
            supervised = rec.supervisor_pid is not None and await process_alive(h, rec.supervisor_pid, None)
            if not supervised:
                code = await exit_code(h, rec)
        if alive:
            rec.status = RunState.RUNNING
        elif code is not None:
            try:
                rec.stop_signal = stop_signal_of(await h.read_bytes(f"{rec.run_dir}/{STOP_REQUESTED}"))
            except FileNotFoundError:
                rec.stop_signal = None
            rec.status = RunState.STOPPED if rec.stop_signal is not None else RunState.EXITED
        elif rec.pid:
            rec.status = RunState.RUNNING if supervised else RunState.LOST  # else nobody will write it
        rec.exit_code = code
        return alive, code

    def view(self, rec: RunRecord) -> JobView | None:
        return None

    async def stop(self, h: Host, rec: RunRecord, grace: float, *, leader_first: bool, engine_plan: bool) -> RunStatus:
        if rec.pid is None:
            raise ServelabError(f"run {rec.id} has no process (status {rec.status})")
        try:  # the engine's own shutdown path and least grace (a run of no engine, a Ray daemon: the plain stop)
            plan = get_adapter(rec.engine).stop_plan if engine_plan else StopPlan()
        except KeyError:
            plan = StopPlan()
        grace, leader_first = max(grace, plan.min_grace_s), leader_first or plan.leader_first
        answer = await runctl(h, "stop", rec.run_dir, f"{grace:g}", *(["--leader-first"] if leader_first else []), timeout=grace + 60)
        if answer.get("error"):
            raise ServelabError(f"{h.name}: {answer['error']}")
        if answer.get("remaining"):
            raise ServelabError(f"run {rec.id}: processes still alive after SIGKILL: {answer['remaining']}")
        state = answer.get("state") or {}
        cleaned = [str(s.get("path")) for s in answer.get("cleaned") or [] if isinstance(s, dict)]
        return RunStatus(record=RunRecord.from_json(state), alive=bool(state.get("alive")), exit_code=state.get("exit_code"), cleaned=cleaned)

    async def base_url(self, h: Host, rec: RunRecord) -> str:
        return f"http://127.0.0.1:{await h.forward_port(rec.port)}"

    def server_address(self, rec: RunRecord) -> str:
        return "127.0.0.1"

    def gpus(self, cfg: HostConfig) -> int | None:
        ids = cfg.gpu_ids
        return len(ids) if ids is not None else None

    preflight_where = ""

    def campaign_refusal(self, host: str, experiment: str) -> str | None:
        return None

    def launch_facts(self, rec: RunRecord) -> dict[str, str]:
        return {}

    def launch_note(self, rec: RunRecord) -> str | None:
        return None

    def engine_state_in_listing(self, rec: RunRecord) -> bool:
        return True

    def preview(self, cfg: HostConfig, catalog: Catalog, exp: SourcedExperiment, spec: LaunchSpec) -> Preview | None:
        return None


PLACEMENT = PlainPlacement
