"""The host kinds: one registry line each (``kind`` in hosts.toml).

A kind is its placement (how a run starts, lives, stops and is reached there: ``engines/placements``)
and, for a kind that needs settings of its own, the model of its ``[hosts.NAME.<kind>]`` table. The
table is what the rest of the core asks about the kind when it reads a definition: whether a
scheduler picks a multi-node run's nodes itself, the address each node rank is given, what it
refuses. Both are loaded by name, so nothing below the placements imports a kind's own package, and
a new kind is its modules plus one line here.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from pydantic import BaseModel

#: The kinds hosts.toml accepts (kept equal to :data:`KINDS`' keys; a test checks it).
KindName = Literal["plain", "slurm"]


@dataclass(frozen=True)
class HostKind:
    #: The module of its placement (it defines ``PLACEMENT``, the class).
    placement: str
    #: How messages name a host of this kind ("a Slurm host").
    title: str
    #: The module defining ``TABLE``, the model of its ``[hosts.NAME.<kind>]`` table (None: it has none).
    table: str | None = None


#: One line a kind.
KINDS: dict[str, HostKind] = {
    "plain": HostKind("servelab.engines.placements.plain", "plain"),
    "slurm": HostKind("servelab.engines.placements.slurm", "Slurm", "servelab.engines.slurm.settings"),
}


@runtime_checkable
class KindTable(Protocol):
    """A kind's ``[hosts.NAME.<kind>]`` table (a pydantic model), as the core reads it."""

    #: Its scheduler places a multi-node experiment's processes itself: one job over ``[multinode]
    #: nodes = N`` of its nodes, never a run per named host.
    picks_nodes: ClassVar[bool]

    def host_problem(self, gpus: object) -> str | None:
        """Why the rest of the host's table conflicts with this one (``gpus`` as written), or None."""
        ...

    def resolved(self, base: Path) -> KindTable:
        """Its relative local paths resolved against ``base`` (the folder holding hosts.toml)."""
        ...

    def rank_address(self, rank: int, shared: bool) -> str:
        """The address a node rank's command is rendered with (``shared``: every node at the head's)."""
        ...

    def backend_problem(self, backend: str) -> str | None:
        """Why a ``[multinode] backend`` cannot run under its scheduler, or None."""
        ...


@cache
def kind_tables() -> dict[str, type[BaseModel]]:
    """Each kind's table model, by kind (the kinds without a table left out)."""
    return {name: importlib.import_module(k.table).TABLE for name, k in KINDS.items() if k.table is not None}


def title(kind: str) -> str:
    known = KINDS.get(kind)
    return known.title if known is not None else kind


def node_picking_titles() -> str:
    """The kinds whose scheduler picks nodes, as a message names them ("Slurm")."""
    return " or ".join(title(k) for k, t in kind_tables().items() if getattr(t, "picks_nodes", False))
