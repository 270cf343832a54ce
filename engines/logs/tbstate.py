"""An open traceback as the tracker reads it: its frames, its exception lines, what was said around it."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

MAX_FRAMES = 12
#: Where a traceback's reading is: its frames, its exception line(s), after them, a chained one's marker.
FRAMES, EXC, AFTER, CHAIN = range(4)


@dataclass
class Exc:
    type: str
    lines: list[str]
    line: int
    where: str | None = None


@dataclass
class Block:
    process: str
    start_line: int
    level: str  # logger level of a logger-emitted traceback ("" for raw output)
    raw: bool  # continuation lines come without a prefix (SGLang's rank tracebacks)
    frames: deque[str] = field(default_factory=lambda: deque(maxlen=MAX_FRAMES))
    where: str | None = None  # innermost 'File "..."' line so far
    engine_where: str | None = None  # innermost one inside the engine's own package
    exceptions: list[Exc] = field(default_factory=list)
    state: int = FRAMES
    last: int = 0  # line number of its latest line
    tag: str = ""  # logger call site of a logger-emitted traceback
    embeds: bool = False  # its exception message carried another traceback
    expect_code: bool = False
    chained: bool = False
    callers: int = 0  # bit i: a frame of the grammar's serving call i's caller was seen
    preface: str = ""  # the error record of the same logger call right before it (logger.exception(e))
    preface_at: int = 0  # its line (0: the line before the traceback's)
    call_stack: bool = False  # logging's dump of a record it failed to print: the call's stack, no failure
    relayed: str | None = None  # the cause Ray's wrapper line named, its remote traceback after it
    error_above: tuple[int, str] | None = None  # an error record of another call site right above its preface (line, text)


__all__ = ["AFTER", "CHAIN", "EXC", "FRAMES", "MAX_FRAMES", "Block", "Exc"]
