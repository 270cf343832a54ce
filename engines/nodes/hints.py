"""Rendezvous hangs of a multi-node run, and the setting each one points at.

A node that printed its engine's "rendezvous begins" line and not its "rendezvous done" line for
longer than the engine's expected time is stuck joining the others: the hint names what to look
at (the head's address and port, the interface, a stale head). Lines that show a slow or stuck
transport (NCCL on ``NET/Socket``, Ray waiting for a placement group) get their hint at once.
The phrases are the engines' own and live in each adapter (``RendezvousGrammar``); this module
holds none of them.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Protocol

from servelab.engines.adapters.exchange import RendezvousGrammar


class HasRendezvous(Protocol):
    rendezvous: RendezvousGrammar


@dataclass(frozen=True)
class RendezvousHint:
    """A hint for one node: the line it rests on and what to check."""

    rank: int
    host: str
    line: str
    hint: str
    #: Seconds the node has been waiting since the begin line (None for a phrase hint).
    waited_s: float | None = None
    #: What servelab told the node to dial, beside what it told the head (empty when not known).
    dials: str = ""

    def render(self) -> str:
        waited = f" for {self.waited_s:.0f} s" if self.waited_s is not None else ""
        return f"node {self.rank} ({self.host}) stuck{waited} at {self.line.strip()!r}: {self.hint}" + (f"; {self.dials}" if self.dials else "")


def join_args(grammar: RendezvousGrammar, argv: list[str]) -> str | None:
    """The node's join flags with their values, as servelab passed them (``--dist-init-addr 10.0.0.1:5000``)."""
    said = [f"{flag} {argv[i + 1]}" for flag in grammar.join_flags for i, word in enumerate(argv[:-1]) if word == flag]
    return " ".join(said) or None


def dials_of(grammar: RendezvousGrammar, rank: int, argvs: dict[int, list[str]]) -> str:
    """Where node ``rank`` was told to join, against the head: a mismatch is the first thing to fix."""
    mine = join_args(grammar, argvs.get(rank, []))
    if mine is None:
        return ""
    head = join_args(grammar, argvs.get(0, []))
    if rank == 0 or head is None:
        return f"node {rank} was given {mine}"
    if head != mine:
        return f"node {rank} was given {mine} but the head (node 0) {head}: they differ ([multinode] head_address, or the head's address in hosts.toml and [multinode] port)"
    return f"node {rank} was given {mine}, as the head was (the head's address in hosts.toml, [multinode] port)"


_STAMP = re.compile(r"(?:(\d{4})-)?(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)")


def stamp_of(text: str, year: int) -> float | None:
    """The line's own timestamp (vLLM ``MM-DD HH:MM:SS``, SGLang ``YYYY-MM-DD HH:MM:SS``) as epoch
    seconds, reading it as UTC; :func:`local_now` reads the clock the same way."""
    m = _STAMP.search(text[:80])
    if m is None:
        return None
    try:
        stamp = dt.datetime(
            int(m.group(1)) if m.group(1) else year, int(m.group(2)), int(m.group(3)),
            int(m.group(4)), int(m.group(5)), int(m.group(6)), tzinfo=dt.timezone.utc,
        )
    except ValueError:
        return None
    return stamp.timestamp()


def local_now() -> float:
    """This machine's wall clock as the engines print it (local time), on the scale of :func:`stamp_of`."""
    return dt.datetime.now().replace(tzinfo=dt.timezone.utc).timestamp()


def scan_join(grammar: RendezvousGrammar, lines: list[str], now: float) -> tuple[str, str, float | None] | None:
    """``(line, hint, waited)`` for one node's lines: a phrase hint, or a begin with no end past the expected time."""
    year = dt.datetime.now().year
    begun: str | None = None
    for ln in lines:
        for phrase, hint in grammar.phrases:
            if phrase in ln:
                return ln, hint, None
        if any(b in ln for b in grammar.begin):
            begun = ln
        elif begun is not None and any(e in ln for e in grammar.end):
            begun = None
    if begun is None:
        return None
    at = stamp_of(begun, year)
    if at is None or now - at < grammar.expected_s:
        return None
    return begun, grammar.settings, now - at


def rendezvous_hint(
    grammar: RendezvousGrammar, logs: dict[int, tuple[str, list[str]]], now: float | None = None, argvs: dict[int, list[str]] | None = None
) -> RendezvousHint | None:
    """The first worker (by rank), else the head, whose log shows a stuck join: ``logs`` maps rank -> (host, lines);
    ``argvs`` (rank -> the engine's argv) adds where a stuck node was told to dial, against the head."""
    t = local_now() if now is None else now
    # a worker first: the head waiting for its peers is how every failed join looks from the head
    for rank in sorted(logs, key=lambda r: (r == 0, r)):
        host, lines = logs[rank]
        found = scan_join(grammar, lines, t)
        if found is not None:
            line, hint, waited = found
            return RendezvousHint(rank, host, line, hint, waited, dials_of(grammar, rank, argvs or {}) if waited is not None else "")
    return None
