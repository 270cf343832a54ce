"""Values that engine adapters and the core both hold: a launch command, a setting an engine
cannot express, the multi-node plan types (a node, its processes, the engine's rendezvous lines)
and what the probe hands an adapter and gets back (prompts, an acceptance window, histogram names).

A leaf: it imports nothing of servelab, so ``engines/adapters/base.py`` (the protocol), the adapters
(``engines/adapters/vllm.py``, ``engines/adapters/sglang.py``) and ``engines/nodes/`` can all name these types without
importing each other.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class AsDict:
    """A frozen dataclass whose ``to_dict()`` is its fields as plain JSON-ready values (``asdict``)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class StopPlan:
    """How an engine is stopped (each adapter's ``stop_plan``): ``leader_first``, SIGTERM to its
    main process alone first, for an engine that shuts its own children down in order (half the
    grace), then to the run's process group; SIGKILL only after ``min_grace_s`` at least (a shorter
    ``--grace`` is raised to it)."""

    leader_first: bool = False
    min_grace_s: float = 0.0


@dataclass(frozen=True)
class LaunchSpec:
    """The exact argv and extra environment that start an engine. Never passed through a shell."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)

    def display(self) -> str:
        """Shell-quoted, for showing and copying only."""
        return shlex.join(self.argv)


@dataclass(frozen=True)
class Inexpressible:
    """A setting this engine cannot express, reported at check time (never silently dropped)."""

    path: str
    message: str


@dataclass(frozen=True)
class NodeAddress:
    """A node of the experiment: its rank, its hosts.toml name, the address the others reach it at."""

    rank: int
    host: str
    address: str


@dataclass(frozen=True)
class NodeTarget:
    """A node as an adapter renders it: where it is, and its paths as that host sees them."""

    node: NodeAddress
    python: str
    model: str
    draft_model: str | None = None


@dataclass(frozen=True)
class NodeProcess:
    """One process a node runs. ``serves`` marks the one that answers HTTP (only on the head).

    ``check`` is a quick command of the engine's own (run on the node with ``spec.env`` before
    anything starts on any node): when it fails, its last stderr line, in the engine's words, stops
    the launch (``check_label`` names it there). With ``check_script`` (a servelab helper in
    engines/helpers/) the check is that script, run the one way host scripts run (uploaded once,
    ``check[0]`` the interpreter, ``check[1:]`` its arguments). ``port`` is what the process listens on, so nodes
    sharing a machine do not collide (0: nothing of its own, as a Ray worker's daemon or a headless
    vLLM node; None: the experiment's port plus the node's rank). ``up_line``: the launch waits for this line in the process's
    log (at most ``up_timeout_s``) before it starts the next one (a Ray daemon before its peers).
    """

    role: str
    spec: LaunchSpec
    serves: bool = False
    check: list[str] | None = None
    check_script: str | None = None
    port: int | None = None
    check_label: str | None = None
    up_line: str | None = None
    up_timeout_s: float = 120.0


@dataclass(frozen=True)
class NodePlan:
    """What one node runs, in start order."""

    node: NodeAddress
    processes: list[NodeProcess] = field(default_factory=list)


@dataclass(frozen=True)
class RendezvousGrammar:
    """An engine's rendezvous lines: when joining starts, when it is done, and lines that are hints."""

    begin: tuple[str, ...]
    end: tuple[str, ...]
    #: Seconds a healthy join takes at most (on a loaded 2-core CPU box it is ~25 s).
    expected_s: float
    #: What a stuck join points at, in the engine's settings.
    settings: str
    #: ``(phrase, hint)``: a line containing the phrase gets the hint as soon as it shows.
    phrases: tuple[tuple[str, str], ...] = ()
    #: The flags that carry where a node dials the head (``--dist-init-addr``; ``--master-addr``, ``--master-port``).
    join_flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Acceptance(AsDict):
    """Speculative-decoding acceptance over one window, with where it came from.

    ``rate`` = accepted / draft tokens (0..1); ``length`` = 1 + accepted / drafts (counts the bonus
    token); ``per_position[i]`` = accepted at draft position i / drafts.
    """

    source: str
    drafts: float | None
    draft_tokens: float | None
    accepted: float | None
    rate: float | None
    length: float
    per_position: list[float] = field(default_factory=list)


class AcceptanceWindow(Protocol):
    """Brackets the timed requests of one repeat: ``start`` before, ``note`` each, ``finish`` after."""

    async def start(self) -> None:
        """Snapshot or reset whatever the engine counts."""
        ...

    def request_fields(self) -> dict[str, Any]:
        """Extra JSON fields for each chat request (e.g. asking for per-request spec details)."""
        ...

    def note(self, payload: Mapping[str, Any]) -> None:
        """See one request's last non-empty stream payload (usage / engine extras)."""
        ...

    async def finish(self) -> Acceptance | None:
        """The window's acceptance; None when the server did not speculate."""
        ...


@dataclass(frozen=True)
class LatencyHistograms:
    """The names of an engine's own latency histograms in ``/metrics`` (seconds, Prometheus)."""

    ttft: str
    itl: str


@dataclass(frozen=True)
class Prompt:
    """One request: an id, a category, and the chat messages sent (first user turn only)."""

    id: str
    category: str
    messages: tuple[dict[str, str], ...]

    @property
    def text(self) -> str:
        """The last user message, for engines' native (non-chat) routes."""
        return self.messages[-1]["content"]


@dataclass(frozen=True)
class PromptSet:
    """A named, hashed list of prompts."""

    name: str
    prompts: tuple[Prompt, ...]

    @property
    def hash(self) -> str:
        """sha256 of the exact messages in order: equal hashes mean the same requests."""
        blob = json.dumps([[p.id, list(p.messages)] for p in self.prompts], sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def __len__(self) -> int:
        return len(self.prompts)


#: The parts of a target fingerprint, in the order a change is named.
TARGET_PARTS: tuple[tuple[str, str], ...] = (("layout", "architecture (tensor names, shapes, dtypes)"), ("config", "config.json"),
                                             ("tokenizer", "tokenizer"), ("weights", "weights"))


@dataclass(frozen=True)
class TargetIdentity(AsDict):
    """Which target weights a run served, from the weights, not the path (``engines/helpers/weightprint.py``).

    ``fingerprint`` covers the parts: ``layout`` (shard sizes, header lengths, tensor names, shapes,
    dtypes), ``weights`` (fixed small slices of fixed tensors), ``config`` and ``tokenizer`` (file hashes).
    """

    fingerprint: str
    layout: str = ""
    weights: str = ""
    config: str = ""
    tokenizer: str = ""

    @classmethod
    def of(cls, data: Mapping[str, Any] | None) -> TargetIdentity | None:
        """From a JSON object (run.json, diagnosis.json, the helper's answer); None without a fingerprint."""
        if not data or not isinstance(data.get("fingerprint"), str) or not data["fingerprint"]:
            return None
        return cls(**{k: str(data.get(k) or "") for k in ("fingerprint", "layout", "weights", "config", "tokenizer")})

    def differs(self, other: TargetIdentity) -> list[str]:
        """The parts that differ from ``other`` (their names), in TARGET_PARTS' order."""
        return [name for name, _ in TARGET_PARTS if getattr(self, name) != getattr(other, name)]

    def change(self, other: TargetIdentity) -> str:
        """``same architecture, config and tokenizer, other weights``: what differs from ``other``, in words."""
        words = dict(TARGET_PARTS)
        diff = self.differs(other)
        same = [words[n] for n, _ in TARGET_PARTS if n not in diff]
        if not diff:
            return "the same target weights" if self.fingerprint == other.fingerprint else "another target"
        other_txt = "other " + ", ".join(words[n] for n in diff)
        return (f"same {', '.join(same)}; " if same else "") + other_txt


@dataclass(frozen=True)
class SettingsGrammar:
    """Where an engine's log says the settings it resolved, and their names in common terms.

    ``args_line``: a regex whose group 1 is the engine's arguments as a Python literal dict (read with
    ``ast.literal_eval``, never run); ``resolved``: regexes whose named groups are common keys (the
    figures the engine works out itself, e.g. ``kv_cache_tokens``); ``names``: (engine argument,
    common key, inverted) for each argument that has a common meaning (``disable_radix_cache`` is
    prefix caching inverted); ``engine_args``: (common key, ``[engine_args]`` key) to set a value;
    ``states_defaults``: whether the arguments line lists every argument (SGLang) or only those
    that differ from the defaults (vLLM: an argument it does not list is "default");
    ``sampling_line``: a regex whose group 1 is the default sampling parameters the server applies to
    a request that sets none, as a Python literal dict (both engines print the model's generation
    config merged with the overrides once their API is up; no such line by then: none);
    ``info_paths``: HTTP paths where the running server answers with its resolved arguments as one
    JSON object under the same names as ``args_line`` (SGLang's ``/server_info``), tried in turn;
    ``info_figures``: (dotted path in that object, common key) for the figures it worked out itself
    (``max_total_num_tokens``; ``internal_states.0.effective_max_running_requests_per_dp``).
    """

    args_line: str
    resolved: tuple[str, ...]
    names: tuple[tuple[str, str, bool], ...]
    engine_args: tuple[tuple[str, str], ...]
    states_defaults: bool
    sampling_line: str = ""
    info_paths: tuple[str, ...] = ()
    info_figures: tuple[tuple[str, str], ...] = ()
