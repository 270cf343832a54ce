"""Unified diffs for patchtool: parsing a patch into file patches and hunks, and applying hunks to bytes.

Standard library only, no servelab import (it runs on the host in patchtool's bundle). Applying is
in memory: writing files is ``patch_files.py``'s.
"""

from __future__ import annotations

import re

HUNK_RE = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(Exception):
    """A patch that cannot be parsed or applied; the message is one line."""


# -- parsing --------------------------------------------------------------------------------------
class Hunk:
    """One ``@@`` block: the old lines it expects and the new lines it leaves (with line endings)."""

    def __init__(self, old_start: int, old_len: int, new_start: int, new_len: int) -> None:
        self.old_start = old_start
        self.old_len = old_len
        self.new_start = new_start
        self.new_len = new_len
        self.old: list[bytes] = []
        self.new: list[bytes] = []
        self.tags = b""  # b" ", b"-", b"+" per body line, to count leading and trailing context

    @property
    def anchor(self) -> str:
        """Like GNU patch: less context after than before means the hunk ends at end of file; the reverse, at the start."""
        lead = len(self.tags) - len(self.tags.lstrip(b" "))
        trail = len(self.tags) - len(self.tags.rstrip(b" "))
        if lead > trail:
            return "end"
        if trail > lead:
            return "start"
        return ""

    def reversed(self) -> "Hunk":
        h = Hunk(self.new_start, self.new_len, self.old_start, self.old_len)
        h.old, h.new = self.new, self.old
        h.tags = self.tags.replace(b"-", b"\0").replace(b"+", b"-").replace(b"\0", b"+")
        return h


class FilePatch:
    """The hunks for one file; ``old``/``new`` are paths relative to the root, None for /dev/null."""

    def __init__(self, old: str | None, new: str | None) -> None:
        self.old = old
        self.new = new
        self.hunks: list[Hunk] = []

    @property
    def path(self) -> str:
        return self.new if self.new is not None else self.old  # type: ignore[return-value]

    def reversed(self) -> "FilePatch":
        fp = FilePatch(self.new, self.old)
        fp.hunks = [h.reversed() for h in self.hunks]
        return fp


def split_lines(data: bytes) -> list[bytes]:
    """Lines with their endings, split on b"\\n" only (a form feed or a lone \\r stays inside a line)."""
    if not data:
        return []
    parts = data.split(b"\n")
    lines = [p + b"\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _header_path(raw: bytes, strip: int) -> str | None:
    text = raw.decode("utf-8", "surrogateescape").rstrip("\r\n")
    text = text.split("\t", 1)[0].strip()
    if text.startswith('"') and text.endswith('"') and len(text) >= 2:
        text = text[1:-1]
    if text == "/dev/null":
        return None
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if len(parts) <= strip:
        raise PatchError(f"path {text!r} has no components left after stripping {strip}")
    parts = parts[strip:]
    if any(p == ".." for p in parts) or text.startswith("/") and strip == 0:
        raise PatchError(f"path {text!r} leaves the package root")
    return "/".join(parts)


def parse_patch(data: bytes, strip: int = 1) -> list[FilePatch]:
    """Every file section of a unified diff; text before, between and after sections is ignored."""
    lines = split_lines(data)
    files: list[FilePatch] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(b"--- ") and i + 1 < len(lines) and lines[i + 1].startswith(b"+++ "):
            fp = FilePatch(_header_path(line[4:], strip), _header_path(lines[i + 1][4:], strip))
            if fp.old is None and fp.new is None:
                raise PatchError(f"line {i + 1}: both sides are /dev/null")
            i += 2
            while i < len(lines) and lines[i].startswith(b"@@"):
                i = _parse_hunk(lines, i, fp)
            if not fp.hunks:
                raise PatchError(f"line {i + 1}: file section for {fp.path} has no hunks")
            files.append(fp)
            continue
        i += 1
    if not files:
        raise PatchError("no unified-diff file sections found (expected '--- a/...' and '+++ b/...' lines)")
    return files


#: A hunk body line's tag -> (it stands on the old side, on the new side, what one too many of it does).
_SIDES: dict[bytes, tuple[bool, bool, str]] = {
    b" ": (True, True, "has more lines than"),
    b"-": (True, False, "removes more lines than"),
    b"+": (False, True, "adds more lines than"),
}


def _parse_hunk(lines: list[bytes], i: int, fp: FilePatch) -> int:
    m = HUNK_RE.match(lines[i])
    if m is None:
        raise PatchError(f"line {i + 1}: malformed hunk header {lines[i][:60]!r}")
    old_len = int(m.group(2)) if m.group(2) is not None else 1
    new_len = int(m.group(4)) if m.group(4) is not None else 1
    hunk = Hunk(int(m.group(1)), old_len, int(m.group(3)), new_len)
    header_line = i + 1
    i += 1
    old_left, new_left = old_len, new_len
    last: list[list[bytes]] = []
    while old_left > 0 or new_left > 0:
        if i >= len(lines):
            raise PatchError(f"line {header_line}: hunk for {fp.path} ends early")
        line = lines[i]
        tag, body = line[:1], line[1:]
        if line in (b"\n", b"\r\n"):  # an editor stripped the space of an empty context line
            tag, body = b" ", line
        sides = _SIDES.get(tag)
        if sides is not None:
            on_old, on_new, too_many = sides
            if (on_old and old_left <= 0) or (on_new and new_left <= 0):
                raise PatchError(f"line {i + 1}: hunk for {fp.path} {too_many} its header says")
            hunk.tags += tag
            last = []
            if on_old:
                hunk.old.append(body)
                old_left -= 1
                last.append(hunk.old)
            if on_new:
                hunk.new.append(body)
                new_left -= 1
                last.append(hunk.new)
        elif tag == b"\\":
            _no_newline(last)
        else:
            raise PatchError(f"line {i + 1}: unexpected line in hunk for {fp.path}: {line[:60]!r}")
        i += 1
    while i < len(lines) and lines[i].startswith(b"\\"):
        _no_newline(last)
        i += 1
    fp.hunks.append(hunk)
    return i


def _no_newline(last: list[list[bytes]]) -> None:
    """``\\ No newline at end of file``: the line before it has no line ending."""
    for side in last:
        if side and side[-1].endswith(b"\n"):
            side[-1] = side[-1][:-1]


# -- applying -------------------------------------------------------------------------------------
def apply_hunks(content: bytes, fp: FilePatch) -> bytes:
    """``content`` with every hunk applied (exact context, any offset, hunks in order); PatchError if one does not fit."""
    lines = split_lines(content)
    out: list[bytes] = []
    pos = 0  # next unconsumed line of `lines`
    delta = 0  # how far the hunks found so far sat from their headers
    for n, hunk in enumerate(fp.hunks, 1):
        want = (hunk.old_start if hunk.old_len == 0 else hunk.old_start - 1) + delta
        if b" " in hunk.tags or not hunk.old:
            at = _find(lines, hunk.old, want, pos, hunk.anchor)
        else:  # no context: where else it matches proves nothing, so only where the header says
            at = want if want >= pos and lines[want : want + len(hunk.old)] == hunk.old else None
        if at is None:
            first = _first_removed(hunk).decode("utf-8", "replace").strip()
            raise PatchError(
                f"{fp.path}: hunk {n} (line {hunk.old_start}) does not match" + (f" near {first[:60]!r}" if first else "")
            )
        delta = at - (hunk.old_start - 1 if hunk.old_len else hunk.old_start)
        out.extend(lines[pos:at])
        out.extend(hunk.new)
        pos = at + len(hunk.old)
    out.extend(lines[pos:])
    return b"".join(out)


def _first_removed(hunk: Hunk) -> bytes:
    """The first line a hunk removes (what a reader looks for), else its first context line."""
    old_tags = [tag for tag in hunk.tags if tag != ord("+")]
    for tag, line in zip(old_tags, hunk.old):
        if tag == ord("-"):
            return line
    return hunk.old[0] if hunk.old else b""


def _find(lines: list[bytes], block: list[bytes], want: int, lo: int, anchor: str = "") -> int | None:
    """The start index nearest ``want`` (not before ``lo``) where ``block`` sits exactly in ``lines``."""
    if not block:  # a pure insertion without context goes where its header says
        return min(max(want, lo), len(lines))
    hi = len(lines) - len(block)
    if anchor == "end":
        lo = max(lo, hi)
    elif anchor == "start":
        hi = min(hi, 0)
    if hi < lo:
        return None
    want = min(max(want, lo), hi)
    for dist in range(0, max(want - lo, hi - want) + 1):
        for cand in (want - dist, want + dist):
            if lo <= cand <= hi and lines[cand : cand + len(block)] == block:
                return cand
    return None
