"""The values of a run, and the protocol the layers below ``engines.runs.manager`` act on runs through.

``engines/runs/manager.py`` (``Runs``) is the top of engines/' areas: it launches and tracks runs and
resolves a run id (an ordinary run, a multi-node group or one of its nodes). The areas below it
(nodes, campaign, diagnosis, probe) hold a run as these values and act on it through
:class:`RunsAPI`, which ``Runs`` implements; none of them imports ``engines.runs.manager``
(import-linter's layers contract in pyproject.toml).
"""

from __future__ import annotations

import datetime as dt
import re
import secrets
from collections.abc import AsyncGenerator, Callable
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from servelab.engines.errors import ServelabError
from servelab.engines.hosts.base import Host, host_workdir
from servelab.engines.hosts.seen import HostSeen
from servelab.engines.hosts.hostsfile import HostConfig
from servelab.engines.logs.analysis import Analysis
from servelab.engines.hosts.owner import Owner
from servelab.engines.runs.placed import KEY as PLACED_KEY, JobView, Placed, placed_of
from servelab.engines.runs.state import RunState
from servelab.engines.adapters.exchange import LaunchSpec, TargetIdentity

if TYPE_CHECKING:
    from servelab.engines.catalog.folder import Catalog
    from servelab.engines.catalog.experiment import SourcedExperiment
    from servelab.engines.logs.live import LiveAnalyses

RUNS_DIR = "runs"
LOG_NAME = "engine.log"
RUN_JSON = "run.json"
EXIT_CODE = "exit_code"
#: Files the lifecycle owns; artifacts may not overwrite them.
RESERVED = frozenset({RUN_JSON, LOG_NAME, EXIT_CODE, "experiment.toml", "stop_requested", "shm-owned.json"})
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*-\d{8}-\d{6}-[0-9a-f]{4}$")
ARTIFACT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
#: Bytes of a log's end :meth:`Runs.log_tail` reads: a few screens of lines, in one round trip.
TAIL_BYTES = 256 << 10


def new_run_id(experiment: str, now: dt.datetime | None = None) -> str:
    """``<experiment>-<YYYYmmdd-HHMMSS>-<4 hex>``."""
    now = now or dt.datetime.now()
    return f"{experiment}-{now:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def runs_root(host: HostConfig) -> str:
    return f"{host_workdir(host)}/{RUNS_DIR}"


@dataclass
class RunRecord:
    """What ``run.json`` holds about one run."""

    id: str
    experiment: str
    engine: str
    host: str
    argv: list[str]
    env: dict[str, str]
    port: int
    model: str
    run_dir: str
    log_path: str
    started_at: str = ""
    pid: int | None = None
    pgid: int | None = None
    start_time: int | None = None
    supervisor_pid: int | None = None
    status: RunState = RunState.LAUNCHING
    exit_code: int | None = None
    #: sha256 of each patch file of the definition, by file name.
    patch_hashes: dict[str, str] = field(default_factory=dict)
    #: What preflight found in the engine's package: patches and patched files with their sha256.
    patches: dict[str, Any] = field(default_factory=dict)
    identity: str = ""
    #: When the engine process started, on its host's local clock (the clock its log prints); "" before it started.
    started_local: str = ""
    #: A rehearsal (``engines/rehearsal``): the launch's start-up with dummy weights, stopped once it answered.
    rehearsal: bool = False
    #: The run's own peak GPU memory, MiB by GPU index (as a string: JSON keys), sampled by its
    #: supervisor on the host; empty on CPU hosts and before the first allocation.
    gpu_peak_mib: dict[str, int] = field(default_factory=dict)
    #: Seconds from the engine's start to its first GPU allocation (to the supervisor's sample).
    gpu_first_alloc_s: float | None = None
    #: Where the run's placement put it, when that is more than a process (``engines/runs/placed.py``:
    #: a scheduler's job, its nodes and last state); empty for a run started as a process group.
    placement: Placed = field(default_factory=Placed)
    #: The node its server runs on and the address its ports are reached at, when its placement chose
    #: one ("" for a run on its host itself).
    head_node: str = ""
    head_address: str = ""
    #: The last signal servelab's stop sent (``SIGTERM``, ``SIGKILL`` after the grace), None when no
    #: stop was asked for: a run servelab stopped reads "stopped · SIGTERM" whatever it printed or
    #: exited with while dying.
    stop_signal: str | None = None
    #: The served target by its weights, not its path (``TargetIdentity.to_dict()``; empty when the
    #: folder is not a readable safetensors checkpoint, e.g. a hub id the engine downloads).
    target: dict[str, str] = field(default_factory=dict)
    #: The drafter's weights fingerprint (``diagnosis/identity.py``; "" without a readable drafter).
    drafter_fingerprint: str = ""
    #: Name prefixes its engine's processes give their /dev/shm files (the adapter's
    #: ``shm_prefixes``): the host-side cleanup removes a run's files only under these or the
    #: prefixes every engine shares.
    shm_prefixes: list[str] = field(default_factory=list)

    @property
    def target_identity(self) -> TargetIdentity | None:
        return TargetIdentity.of(self.target)
    #: Who launched it (``engines/owner``): the user and machine servelab ran as and on, and the id
    #: of that servelab process; "" for a run recorded before owners were.
    launched_by: str = ""
    launched_from: str = ""
    servelab_instance: str = ""

    @property
    def owner(self) -> Owner:
        return Owner(self.launched_by, self.launched_from, self.servelab_instance)

    @property
    def kind_word(self) -> str:
        """``rehearsal`` for a rehearsal, "" for a run: the mark every listing shows."""
        return "rehearsal" if self.rehearsal else ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunRecord:
        """Build from run.json (or runctl's status), ignoring keys this version does not know."""
        known = {f.name for f in fields(cls)} - {PLACED_KEY}
        rec = cls(**{k: v for k, v in data.items() if k in known}, placement=placed_of(data))
        rec.status = RunState.parse(rec.status)
        return rec


@dataclass
class RunStatus:
    """A run as it is now: its record, whether the engine lives, its exit code, the log analysis."""

    record: RunRecord
    alive: bool
    exit_code: int | None
    #: What the log says (None when not asked for, or when the log could not be read).
    analysis: Analysis | None = None
    #: Why the analysis is missing when the analyzer failed (one line).
    analysis_error: str | None = None
    #: Its scheduler's view, in servelab's words, for a run placed as a job (None for a process).
    job: JobView | None = None
    #: What a stop removed with the run (its own /dev/shm files), as runctl answered; empty otherwise.
    cleaned: list[str] = field(default_factory=list)

    @property
    def status(self) -> RunState:
        return self.record.status

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = self.analysis.to_json() if self.analysis is not None else {}
        if self.analysis_error is not None:
            out["analysis_error"] = self.analysis_error
        out.update(
            {
                "run": self.record.id,
                "experiment": self.record.experiment,
                "engine": self.record.engine,
                "host": self.record.host,
                "status": self.record.status,
                "pid": self.record.pid,
                "pgid": self.record.pgid,
                "alive": self.alive,
                "exit_code": self.exit_code,
                "stop_signal": self.record.stop_signal,
                "rehearsal": self.record.rehearsal,
                "launched_by": self.record.launched_by,
                "launched_from": self.record.launched_from,
                "servelab_instance": self.record.servelab_instance,
                "port": self.record.port,
                "started_at": self.record.started_at,
                "log_path": self.record.log_path,
                "run_dir": self.record.run_dir,
            }
        )
        if self.job is not None:
            out[self.job.scheduler] = self.job.to_json()
        return out


@dataclass(frozen=True)
class LogTail:
    """The end of a run's log: whole lines from byte ``offset`` of the log on."""

    offset: int
    data: bytes


@dataclass
class KnownRun:
    """A run as a screen lists it: as its host answered now, or as last seen when the host is down."""

    record: RunRecord
    #: The host that did not answer (since when, why); None when the record is current.
    down: HostSeen | None = None

    @property
    def stale(self) -> bool:
        return self.down is not None


@dataclass(frozen=True)
class Located:
    """A run already found: the host holding it and its record as read then. Every :class:`Runs`
    method that takes a run id takes one of these too and then asks no host where the run is."""

    host: Host
    record: RunRecord

    @property
    def id(self) -> str:
        return self.record.id

    async def read(self, name: str) -> bytes | None:
        """A file of the run's folder on its host (``probe.json``, ``engine.log``...); None when absent."""
        check_artifact(name, reading=True)
        try:
            return await self.host.read_bytes(f"{self.record.run_dir}/{name}")
        except FileNotFoundError:
            return None

    async def write(self, name: str, data: bytes) -> None:
        """Store a file (``probe.json``...) in the run's folder on its host, atomically."""
        check_artifact(name)
        await self.host.write_bytes(f"{self.record.run_dir}/{name}", data)


def check_artifact(name: str, *, reading: bool = False) -> None:
    """A run folder's file name an artifact may have (and, to write, not one the lifecycle owns)."""
    if not ARTIFACT_RE.match(name) or (not reading and name in RESERVED):
        raise ServelabError(f"not an artifact name: {name!r}")


#: A run id to look up, or a run located before.
RunRef = str | Located


class NoSuchRun(ServelabError):
    """No configured host holds a run of this id (every host answered, or the others could not)."""


class RunUnreachable(ServelabError):
    """The run's host is known but cannot be reached: its state is unknown (not "no run")."""

    def __init__(self, run_id: str, host: str, reason: str, last: RunRecord | None, seen_at: str | None, note: str | None = None) -> None:
        #: ``note``: "unreachable, checked 12:04" (the host's last failed check).
        self.run_id, self.host, self.reason, self.last, self.seen_at, self.note = run_id, host, reason, last, seen_at, note
        super().__init__(f"{host} unreachable: {reason}; the run's state is unknown{self._seen()}")

    def _seen(self) -> str:
        if self.last is not None and self.seen_at:
            return f", last seen {self.last.status} at {self.seen_at}"
        return ", not seen from this machine before"

    def short(self) -> str:
        """For a title: ``box unreachable, checked 07:41 · state unknown, last seen running at 07:40:58 · why``."""
        return f"{self.host} {self.note or 'unreachable'} · state unknown{self._seen()} · {self.reason}"


def unreachable_reason(cfg: HostConfig, exc: BaseException) -> str:
    """A host's refusal without the ``name (target): `` prefix the message starts with (the caller names the host)."""
    text = str(exc)
    for prefix in (f"{cfg.name} ({cfg.ssh}): ", f"{cfg.name}: "):
        if text.startswith(prefix):
            return text[len(prefix) :]
    return text


class RunKind(StrEnum):
    """What a run id named."""

    ORDINARY = "ordinary"
    GROUP = "group"
    NODE = "node"


@dataclass(frozen=True)
class NodeRun:
    """One node process of a multi-node run: where it runs and its own run id (``nodes.json``'s)."""

    rank: int
    host: str
    role: str
    run_id: str
    serves: bool


@dataclass(frozen=True)
class GroupSummary:
    """A multi-node run as the areas below ``engines.nodes`` see it: its group id and node processes."""

    id: str
    nodes: tuple[NodeRun, ...]

    def identity(self) -> list[dict[str, object]]:
        """The probe identity's ``nodes``: host, rank, role and run id of every node process."""
        return [{"rank": n.rank, "host": n.host, "role": n.role, "run": n.run_id, "serves": n.serves} for n in self.nodes]


@dataclass(frozen=True)
class ResolvedRun:
    """A run id, resolved once (``Runs.resolve``): the id asked, what it named, and the located run
    that serves for it (the run itself, or the head's node process of its group)."""

    #: The id as it was asked.
    asked: str
    #: The run whose server answers.
    head: Located
    #: The multi-node run the id belongs to (None for an ordinary run).
    group: GroupSummary | None
    kind: RunKind

    @property
    def run_id(self) -> str:
        """The run id that serves (the head's for a multi-node run)."""
        return self.head.id

    @property
    def host(self) -> Host:
        return self.head.host

    @property
    def record(self) -> RunRecord:
        return self.head.record


class RunsAPI(Protocol):
    """What the areas below ``engines.runs.manager`` may ask of the runs of one experiments folder
    (``engines.runs.manager.Runs`` is the implementation; a caller passes its ``Runs`` down)."""

    catalog: Catalog
    #: Hosts the last :meth:`list` could not reach, with the one-line reason.
    unreachable: dict[str, str]
    live: LiveAnalyses

    def host(self, name: str) -> Host: ...

    async def launch(
        self, exp_name: str, host: str | None = None, *, skip_preflight: bool = False, progress: Callable[[Any], None] | None = None
    ) -> RunRecord: ...

    async def start_spec(
        self, exp: SourcedExperiment, cfg: HostConfig, spec: LaunchSpec, run_id: str, port: int, patch_record: dict[str, Any],
        *, rehearsal: bool = False,
    ) -> RunRecord: ...

    async def list(self, host: str | None = None) -> list[RunRecord]: ...

    async def find(self, run_id: str) -> tuple[Host, RunRecord]: ...

    async def locate(self, run: RunRef) -> Located: ...

    async def resolve(self, run: str | ResolvedRun) -> ResolvedRun:
        """What ``run`` names, looked up once: an ordinary run, a multi-node run's group id or one of
        its node processes' ids; the located run that serves for it. A resolved run as it is."""
        ...

    async def status(self, run: RunRef, *, analyze: bool = True) -> RunStatus: ...

    def follow(self, run: RunRef, offset: int = 0) -> AsyncGenerator[tuple[int, bytes], None]: ...

    async def stop(self, run: RunRef, grace: float = 10.0, *, leader_first: bool = False, engine_plan: bool = True) -> RunStatus: ...

    async def write_artifact(self, run: RunRef, name: str, data: bytes) -> None: ...

    async def read_artifact(self, run: RunRef, name: str) -> bytes | None: ...

    async def base_url(self, run: RunRef) -> str: ...
