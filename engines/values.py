"""Values that engine adapters and the core both hold: a launch command, a setting an engine
cannot express, and the multi-node plan types (a node, its processes, the engine's rendezvous lines).

A leaf: it imports nothing of servelab, so ``engines/adapter.py`` (the protocol), the adapters
(``engines/vllm.py``, ``engines/sglang.py``) and ``engines/nodes/`` can all name these types without
importing each other.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field


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
    sharing a machine do not collide. ``up_line``: the launch waits for this line in the process's
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
