"""Line prefixes added by whatever captured a log, found from the lines themselves and stripped.

``docker compose logs`` writes ``vllm-1  | `` before every line, log viewers ``  | `` or ``│ ``, journald ``Dec 01
12:00:00 gpu-3 vllm[2211]: ``, ``kubectl logs --timestamps`` an RFC 3339 stamp; some platforms print a
timestamp-and-pod line after every engine line. None of these is a list here: :class:`PrefixNormalizer` learns the
shape.

How: on the log's first lines, :func:`line_start` finds where an engine's own line begins (a registered engine's
logger header or rank tag, its grammar's ``line_starts``; a process tag, a traceback's first line, an exception line:
:data:`NEUTRAL_STARTS`). The bytes in front of it, when there are any, are a prefix candidate; its *shape* generalises
it (a run of word characters is any word, a padding run of spaces any padding, punctuation stays), so ``vllm-1  | ``
and ``sglang-1 | `` (two interleaved streams) are one shape. The shapes that stand before most engine lines are learnt
(an engine line only counts when it begins the line or follows a space: a colour code's remains before a Ray tag are
neither for nor against; a launcher's Python logger header before an engine's tag or header is a prefix too; two
tools' prefixes stack, the inner one on some lines only); so are platform lines (a timestamp and at most a few names,
no engine text) repeated beside them. With hardly any engine lines, the shape most lines (blank ones behind the prefix
included) begin with is. Until enough lines have been seen the lines are held (a few dozen of a live log's first
lines, or all of a short excerpt until :meth:`PrefixNormalizer.finish`); a bare log's lines go out at once, up to a
line that shows a prefix (a copy whose first line lost it).

Then each chunk is rewritten at C speed: one compiled bytes regex anchored on ``\\n`` removes the platform lines,
another strips the prefixes; a chunk with many lines left unstripped is learnt from again (a stream of a new shape
appeared). A log with no prefix costs nothing once decided: the analyzer drops the normalizer
(:attr:`PrefixNormalizer.bare`).

What was stripped is :meth:`PrefixNormalizer.value`, a :class:`~servelab.engines.logs.analysis.LinePrefix`."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import replace
from functools import lru_cache

from servelab.engines.logs.lines import Line, strip_ansi
from servelab.engines.logs.analysis import LinePrefix
from servelab.engines.logs.shapes import MAX_PREFIX, fields_of, is_platform, platform_shape, shape_of, strong

__all__ = ["LEARN_LINES", "NEUTRAL_STARTS", "PrefixNormalizer", "line_start", "line_starts", "shape_of"]

_LEVEL = rb"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)"
#: A Python logger's header after its stamp's time: the fraction, maybe its name (and pid), the level.
_PY_LOGGER = rb"(?:[.,]\d+)? (?:- )?(?:[\w.]+ (?:\d+ )?(?:- )?)?" + _LEVEL + rb"\b"
#: Where a line of any engine begins, beside each engine's own forms (its grammar's ``line_starts``):
#: the forms of the tools every engine's processes share. Engine forms only, so a capture tool's
#: stamp is never taken for one.
NEUTRAL_STARTS: tuple[bytes, ...] = (
    _LEVEL + rb":  ",  # uvicorn ("INFO:     127.0.0.1:...")
    # Ray's process tag (vLLM's processes print it too) "(EngineCore pid=7) ", with the remains of the colour
    # code vLLM ends it with when a copy lost its ESC byte ("(Worker_TP5 pid=422)[0;0m ", or "[" too: ")0m ")
    rb"\([^()\n]{0,80}?pid=\d+[^()\n]{0,80}?\)(?:\[?\d{1,3}(?:;\d{1,3})*m)? ",
    rb"\[[A-Za-z_][\w.-]{0,80}? pid=\d+\] ",  # vLLM's process tag in brackets (vllm-ascend 0.23) "[Worker_TP0 pid=7] "
    # Python logging (SGLang 2025 prints it too), its logger's name maybe before the level ("- __main__ - WARNING")
    rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d" + _PY_LOGGER,
    rb"\[rank\d+\]:",  # torch's per-rank tag
    rb"Traceback \(most recent call last\):",
    rb'  File "',  # a traceback's frame (its indentation is the engine's)
    rb"(?<![\w.])[A-Za-z_][\w.]*(?:Error|Exception|Interrupt): ",  # an exception line
)
#: Of those, the headers a launcher's Python logger may re-log after its own (beside each engine's
#: ``relogged_starts``).
NEUTRAL_RELOGGED: tuple[bytes, ...] = NEUTRAL_STARTS[1:3]
#: A Python logger's header at the start of a line (a launcher's, when an engine line follows it) ...
_OUTER = re.compile(rb"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d" + _PY_LOGGER)


@lru_cache(maxsize=16)
def _compile(starts: tuple[bytes, ...], relogged: tuple[bytes, ...]) -> tuple[re.Pattern[bytes], re.Pattern[bytes]]:
    """Where a line begins (searched, leftmost wins: a line that begins with one has no prefix), and
    where an engine line re-logged behind :data:`_OUTER` begins (after a space)."""
    return re.compile(b"|".join(starts)), re.compile(rb"(?<= )(?:" + b"|".join(relogged) + rb")")


def line_starts() -> tuple[re.Pattern[bytes], re.Pattern[bytes]]:
    """:func:`_compile` over every registered engine's grammar (its ``line_starts`` and
    ``relogged_starts``, in registry order) and the neutral forms: a plug-in engine's header counts
    as soon as it is registered."""
    from servelab.engines.adapters.base import all_adapters

    grammars = [a.grammar for a in all_adapters()]
    starts = tuple(dict.fromkeys(s for g in grammars for s in g.line_starts))
    relogged = tuple(dict.fromkeys(s for g in grammars for s in g.relogged_starts))
    return _compile(starts + NEUTRAL_STARTS, relogged + NEUTRAL_RELOGGED)


def line_start() -> re.Pattern[bytes]:
    """Where an engine's own line begins, for every registered engine (see :func:`line_starts`)."""
    return line_starts()[0]


#: What a capture prefix found without engine lines must hold: a time of day, or a separator glyph
#: before its last space (``|``, ``>``, a box-drawing character).
_TIME = re.compile(rb"(?<!\d)\d\d:\d\d:\d\d(?!\d)")
_SEPARATOR = re.compile(rb"(?:[|>]|[\x80-\xff]) +$")
#: A colour code whose escape byte a copy lost ("[2m", "[0m"): invisible in the field it ends.
_REMNANT = re.compile(rb"\[\d{1,3}(?:;\d{1,3})*m")
#: A progress bar's count ("  1% Completed | 1/99"): the engine's text, never a prefix's.
_PERCENT = re.compile(rb"\d%")
_PERCENT_NEXT = re.compile(rb" *\d+(?:\.\d+)?%")
#: Indentation and names only, no punctuation: a line's own indented text, never a prefix.
_INDENTED = re.compile(rb"[ \t]+[\w.-]+(?: +[\w.-]+)* +")
#: An exception named inside a message ("... with ret = IOError: getaddrinfo() failed"): what stands
#: before it ends in no prefix's last field (a stamp, a colon, a bracket, a separator), so it is text.
_PROSE_BEFORE = re.compile(rb"(?s).*[^\s:\]|>)\x80-\xff\d] +")
_EXCEPTION_AT = re.compile(NEUTRAL_STARTS[-1])  # (the neutral exception-line start)
#: How a prefix's last field ends: a colon, a bracket, a separator glyph.
_FIELD_END = re.compile(rb"(?:[:\]|>]|[\x80-\xff])$")
#: A list item's bullet or number ("- ", "* ", "• ", "2. ", "3) "): a message's own text, never a prefix.
_BULLET = re.compile(rb"(?:(?<= )|^)(?:[-*+]|\xe2\x80\xa2|\d{1,3}[.)])[ \t]+$")

#: Lines learnt from before the decision is forced (a log with few engine lines).
LEARN_LINES = 1000
#: Engine lines seen before deciding (a live log's first second holds more).
_EVIDENCE = 24
#: ... or this many, when they all agree (a live log's first lines are held until then).
_EARLY = 4
#: A shape is learnt when it stands before this share of the engine lines.
_SHARE = 0.2
#: Lines kept to learn from when there are too few engine lines (a short excerpt, an argparse error).
_SAMPLE = 200
#: With fewer engine lines than this, a shape that stands at the start of most lines is the prefix.
_FEW = 3
#: ... on this share of the non-blank lines.
_MOST = 0.8
#: At most this many streams (distinct texts of a prefix's last field) in one log.
_STREAMS = 8
#: Times a prefixed log is learnt from again when a chunk's lines are mostly left unstripped.
_RELEARN = 8
#: Leading fields a prefix found without engine lines may have (three stacked capture prefixes:
#: a container stamp, a viewer's "|", journald's "Dec  1 12:00:00 host unit[pid]:" take 8).
_MAX_FIELDS = 12


def _separated(line: bytes, p: int) -> bool:
    """What stands before ``p`` ends a field: white space, or a CSV export's separator (a CloudWatch
    export's '1756144012376,"' before the engine's line)."""
    return line[p - 1 : p] in (b" ", b"\t", b",") or line[p - 2 : p] == b',"'


class PrefixNormalizer:
    """Chunk-wise prefix stripper in front of the analyzer: ``feed(bytes) -> bytes``, ``finish() -> bytes``."""

    def __init__(self) -> None:
        #: Decided: the log has no prefix and no platform lines (the analyzer stops calling).
        self.bare = False
        self._learning = True
        self._held = b""  # while learning: everything seen (nothing given out yet)
        self._scanned = 0  # bytes of _held already learnt from
        self._released = 0  # bytes of _held free to give out as they are (a bare log's lines)
        self._given = 0  # ... of them already given out
        self._held_nl = True  # the text given out so far ended a line
        self._lines = 0
        self._starts = 0  # engine lines seen
        self._at0 = 0  # ... of them with no prefix
        self._cands: Counter[bytes] = Counter()
        self._plats: Counter[bytes] = Counter()
        self._examples: dict[bytes, list[str]] = {}
        self._sample: list[bytes] = []
        self._raw: dict[bytes, set[bytes]] = {}  # each shape's prefixes as printed (a few)
        self._literals: list[bytes] = []  # "\n" + each stream's prefix, when they are few and fixed
        self._shapes: list[bytes] = []
        self._plat_shapes: list[bytes] = []
        self._strip: re.Pattern[bytes] | None = None
        self._lead: re.Pattern[bytes] | None = None
        self._drop: re.Pattern[bytes] | None = None
        self._drop_line: re.Pattern[bytes] = re.compile(b"(?!)")
        self._tail = b""  # an unfinished line (held: its prefix may be cut)
        self._midline = False  # the text given out last ended inside a line (its prefix already gone)
        self._relearn = _RELEARN
        self._line_start, self._relogged = line_starts()
        self.stripped = 0
        self.dropped = 0
        #: Fed split lines (:meth:`feed_lines`) rather than bytes.
        self.lines_fed = False
        self._held_lines: list[Line] = []
        self._phys: list[str] = []  # the segments of the physical line being read (feed_lines)
        self._number = 0  # its number (0: none yet)
        self._gone = 0  # platform lines dropped before it (later lines are renumbered)
        self._dropping = False  # the physical line being read is a platform line
        self._phys_free = False  # the physical line being read is given out as it is (learning)
        self._released_number = 0  # the last Line given out while learning

    # -- learning -------------------------------------------------------------------------------
    def _observe(self, line: bytes) -> None:
        self._lines += 1
        if len(self._sample) < _SAMPLE and line.strip():
            self._sample.append(line)
        m = self._line_start.search(line)
        if m is not None:
            p = m.start()
            if (b := _BULLET.search(line, 0, p)) is not None:
                p = b.start()  # a list's bullet before it ("- ImportError: ...") is the message's own text
            if _OUTER.match(line, p) and (inner := self._relogged.search(line, p + 1, MAX_PREFIX + 80)) is not None:
                # a launcher's Python logger re-logging the engine's lines, or a capture tool's stamp
                # before an engine header that starts with its level ("2024-07-23 19:51:51 ERROR 07-23 14:21:51 ...")
                p = inner.start()
            if p == 0:
                self._starts += 1
                self._at0 += 1
            elif p <= MAX_PREFIX and _separated(line, p) and line[:p].strip() and not _INDENTED.fullmatch(line, 0, p) and not (
                _EXCEPTION_AT.match(line, p) and _PROSE_BEFORE.fullmatch(line, 0, p)  # (spaces alone: a paste's indentation)
            ):
                # (indented names before it are the engine's own text: a frame glued to a frame, two
                # ranks' tracebacks interleaved character by character)
                # (an engine form after other text, a colour code's remains, is no evidence either way)
                self._starts += 1
                shape = shape_of(line[:p])
                self._cands[shape] += 1
                raw = self._raw.setdefault(shape, set())
                if len(raw) <= _STREAMS:
                    raw.add(line[:p])
                ex = self._examples.setdefault(shape, [])
                text = line[:p].decode("utf-8", "replace")
                if len(ex) < 4 and text not in ex:
                    ex.append(text)
        elif is_platform(line):
            self._plats[platform_shape(line)] += 1

    def _learn(self, buf: bytes, start: int, limit: int) -> int:
        """Learn from the complete lines of ``buf[start:]`` (at most ``limit``); returns where it stopped."""
        pos = start
        while limit > 0 and not self._settled():
            nl = buf.find(b"\n", pos)
            if nl == -1:
                break
            line = buf[pos:nl]
            if line[-1:] == b"\r":
                line = line[:-1]
            line = strip_ansi(line)
            self._observe(line)  # first: the log's first engine line, bare, is free itself (a live view stays live)
            free = self._free_line(line)
            pos = nl + 1
            limit -= 1
            if free:
                self._released = max(self._released, min(pos, len(self._held)))
        return pos

    def _free(self) -> bool:
        """The lines so far are a bare log's (an engine line with nothing before it, no sign of a
        prefix): the next line is given out as it is, before the decision (a live view stays live)."""
        return self._at0 > 0 and not self._cands and not self._plats

    def _free_line(self, line: bytes) -> bool:
        """The line is given out as it is: the lines before it are a bare log's and its first segment
        (to a ``\\r``: what a live view shows first) shows no prefix (the first line lost it in a copy)."""
        if not self._free():
            return False
        seg = line.split(b"\r", 1)[0]
        seg = strip_ansi(seg)
        m = self._line_start.search(seg)
        return not (m is not None and 0 < m.start() <= MAX_PREFIX and _separated(seg, m.start()))

    def _settled(self) -> bool:
        """Enough lines seen to decide (by content only, so any chunking decides at the same line):
        the first few engine lines already agree (all bare, or all behind one shape), or many were seen."""
        starts = self._starts
        if starts >= _EVIDENCE or self._lines >= LEARN_LINES:
            return True
        if starts < _EARLY:
            return False
        if self._at0 == starts:
            return not self._plats
        return len(self._cands) == 1 and next(iter(self._cands.values())) == starts

    def _decide(self) -> list[bytes]:
        """The shapes the lines seen so far support (prefix shapes first, then platform shapes)."""
        starts = self._starts
        thr = max(2.0, _SHARE * starts)
        shapes = [s for s, c in self._cands.items() if c >= thr]
        if sum(self._cands[s] for s in shapes) * 2 <= starts:
            shapes = []
        if starts < _FEW and not shapes:
            shapes = self._most_lines()
        plats = [s for s, c in self._plats.items() if c >= max(2.0, _SHARE * starts, _SHARE * self._lines)]
        return [*shapes, b"", *plats]

    def _most_lines(self) -> list[bytes]:
        """Too few engine lines: the longest shape of leading fields (with punctuation in them, and
        never past where an engine line begins) that most lines start with."""
        # (a platform line is dropped whole: it neither holds nor refuses a prefix)
        sample = [ln for ln in self._sample if not is_platform(ln)]
        if len(sample) < 2:
            return []
        best: list[bytes] = []
        for k in range(1, _MAX_FIELDS + 1):
            counts: Counter[bytes] = Counter()
            texts: dict[bytes, bytes] = {}
            lasts: dict[bytes, set[bytes]] = {}
            alone = 0  # lines that are an outer prefix alone (blank lines behind it): neither for nor against
            for line in sample:
                fields = fields_of(line)
                if len(fields) < k and line[-1:] == b" ":
                    alone += 1
                    continue
                if len(fields) < k or (len(fields) == k and line[-1:] != b" "):
                    continue  # (a line that is the prefix alone is a blank line behind it)
                text = b"".join(b"".join(f) for f in fields[:k]).rstrip(b" ") + b" "  # more spaces are the line's own
                if text[-1:] != b" " or not strong(fields[k - 1]) or not (_TIME.search(text) or _SEPARATOR.search(text)):
                    continue
                if _PERCENT.search(text) or _PERCENT_NEXT.match(line, len(text)):
                    # a progress bar's title and count are the engine's text
                    # ("Loading safetensors checkpoint shards:   1% Completed | ")
                    continue
                last_field = _REMNANT.sub(b"", b"".join(fields[k - 1]).rstrip(b" "))
                if k > 1 and (b")" in last_field or not (_TIME.search(last_field) or _FIELD_END.search(last_field))):
                    # a prefix ends in a stamp, a separator, a unit[pid]: or a tag]: never in a phrase's
                    # comma or a parenthesis ("Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): ")
                    continue
                m = self._line_start.search(line)
                if m is not None and m.start() < len(text):
                    continue
                shape = shape_of(text)
                counts[shape] += 1
                texts.setdefault(shape, text)
                last = b"".join(fields[k - 1]).rstrip(b" ")
                if not _TIME.search(last):
                    lasts.setdefault(shape, set()).add(last)
            if not counts:
                continue
            shape, c = counts.most_common(1)[0]
            # a capture tool repeats its last field (a stream name, a unit) or stamps the time;
            # engine text after a separator varies (argparse's "[--flag", a message)
            if c < max(2.0, _MOST * (len(sample) - alone)) or len(lasts.get(shape, ())) > _STREAMS:
                continue
            best = [shape]
            self._raw[shape] = {t for t in (b"".join(b"".join(f) for f in fields_of(ln)[:k]).rstrip(b" ") + b" " for ln in sample) if re.fullmatch(shape, t)}
            ex = self._examples.setdefault(shape, [])
            if not ex:
                ex.append(texts[shape].decode("utf-8", "replace"))
        return best

    def _use(self, found: list[bytes]) -> bool:
        """Add the shapes found; True when any is new (the regexes are rebuilt)."""
        cut = found.index(b"")
        new = [s for s in found[:cut] if s not in self._shapes]
        new_p = [s for s in found[cut + 1 :] if s not in self._plat_shapes]
        if not new and not new_p:
            return False
        self._shapes = sorted(self._shapes + new, key=len, reverse=True)
        self._plat_shapes = sorted(self._plat_shapes + new_p, key=len, reverse=True)
        if self._shapes:
            alt = b"|".join(self._shapes)
            self._strip = re.compile(b"\n(?:" + alt + b")")
            self._lead = re.compile(b"(?:" + alt + b")")
        # one shape printed as a few fixed texts (docker compose's service names, a viewer's bar):
        # each is stripped with bytes.replace, several times faster than the regex
        self._literals = []
        if len(self._shapes) == 1 and b"(?:" not in self._shapes[0] and not self._plat_shapes:
            texts = self._raw.get(self._shapes[0], set())
            if 0 < len(texts) <= _STREAMS and all(self._lead is not None and self._lead.fullmatch(t) for t in texts):
                self._literals = sorted((b"\n" + t for t in texts), key=len, reverse=True)
        if self._plat_shapes:
            alt_p = b"|".join(self._plat_shapes)
            self._drop = re.compile(b"\n(?:(?:" + alt_p + b") *\r?\n)+")
            self._drop_line = re.compile(b"(?:" + alt_p + b") *\r?")
        return True

    def _end_learning(self) -> list[bytes]:
        self._learning = False
        r = self._released
        held, self._held = self._held[r:], b""  # [given:released] was just given out by _release_then
        if not self._use(self._decide()):
            self.bare = True
            return [held]
        # what was given out may have ended inside a line: its rest is not a line start
        self._midline = r > 0 and self._held_nl is False
        return self._rewrite(held)

    # -- feeding --------------------------------------------------------------------------------
    def feed(self, data: bytes) -> list[bytes]:
        """The bytes the analyzer should read for ``data``, in pieces (maybe none yet: the first
        lines are held)."""
        if self._learning:
            self._held += data
            self._scanned = self._learn(self._held, self._scanned, LEARN_LINES - self._lines)
            if self._settled():
                return self._release_then(self._end_learning)
            tail = self._held[self._scanned :]
            if b"\r" in tail and self._free_line(tail):
                self._released = len(self._held)  # the unfinished line too (a bar redrawn with \r)
            return self._release_then(None)
        return self._rewrite(data)

    def _release_then(self, then: Callable[[], list[bytes]] | None) -> list[bytes]:
        """Give out what was released while learning (and, with ``then``, the rest as decided)."""
        held, r, done = self._held, self._released, self._given
        out = held[done:r]
        self._held_nl = r == 0 or held[r - 1 : r] == b"\n"
        if then is not None:
            return [out, *then()]
        # keep only the lines not given out whole (the held text stays what was learnt from)
        cut = min(r, self._scanned)
        if cut:
            self._held = held[cut:]
            self._scanned -= cut
            r -= cut
            self._released = r
        self._given = r
        return [out] if out else []

    def finish(self) -> list[bytes]:
        """End of the stream: what is still held, rewritten."""
        if self._learning:
            if self._held and not self._held.endswith(b"\n"):
                self._learn(self._held + b"\n", self._scanned, 1)
            out = self._release_then(self._end_learning)
            return out + self.finish() if not self.bare else out
        rest, self._tail = self._tail, b""
        if not rest:
            return []
        last = b"".join(self._rewrite(rest + b"\n"))
        return [last[:-1] if last.endswith(b"\n") else last]

    def _rewrite(self, data: bytes) -> list[bytes]:
        """``data`` rewritten, in pieces (the analyzer reads any chunking): the line that completes
        the held one, then the chunk's other complete lines in one piece, read in place."""
        out: list[bytes] = []
        pos = 0
        if self._midline:
            nl = data.find(b"\n")
            if nl == -1:
                return [data]  # the rest of a line whose prefix is already gone
            out.append(data[: nl + 1])
            pos = nl + 1
            self._midline = False
        nl = data.find(b"\n", pos)
        if nl == -1:
            self._tail += data[pos:]
            self._release_tail(out)
            return out
        first = self._tail + data[pos:nl] if self._tail else data[pos:nl]
        cut = data.rfind(b"\n") + 1
        body = self._literal_lines(data, pos, nl, cut) if self._literals else None
        if body is None:
            body = self._lines_of(data, nl, cut)  # begins with the first line's own \n
        if b"\x1b" in first:
            first = strip_ansi(first)
        if self._drop is not None and self._drop_line.fullmatch(first) is not None:
            self.dropped += 1
            body = body[1:]
        else:
            m = self._lead.match(first) if self._lead is not None else None
            if m is not None:
                self.stripped += 1
                first = first[m.end() :]
            out.append(first)
        out.append(body)
        self._tail = data[cut:]
        self._release_tail(out)
        return out

    def _release_tail(self, out: list[bytes]) -> None:
        tail = self._tail
        if b"\r" in tail and self._lead is not None and (m := self._lead.match(tail)) is not None and m.end() < len(tail):
            # a bar redrawn with \r: give it out now (the live view follows it), its prefix stripped
            self.stripped += 1
            out.append(tail[m.end() :])
            self._tail = b""
            self._midline = True

    def _literal_lines(self, data: bytes, pos: int, nl: int, cut: int) -> bytes | None:
        """``data[nl:cut]`` with each stream's fixed prefix replaced away (whole-chunk ``bytes.replace``,
        read in place); None when a line there kept a prefix (a new stream: the regex takes it)."""
        if cut - nl <= 1:
            return None
        if data.find(b"\x1b", nl, cut) != -1:
            # colours: taken out first (the analyzer would do it anyway), then the body on its own
            rep = strip_ansi(data[nl:cut])
            k = 0
            for lit in self._literals:
                before = len(rep)
                rep = rep.replace(lit, b"\n")
                k += (before - len(rep)) // (len(lit) - 1)
            if k != rep.count(b"\n") - 1:
                return None
            self.stripped += k
            return rep
        rep = data
        k = 0
        for lit in self._literals:
            before = len(rep)
            rep = rep.replace(lit, b"\n")
            k += (before - len(rep)) // (len(lit) - 1)
        # the replace also took the prefix of the first line (after a line given out in part) and
        # of the unfinished last one: those are not the body's
        heads = [lit[1:] for lit in self._literals]
        if pos > 0 and any(data.startswith(h, pos) for h in heads):
            k -= 1
        if cut < len(data) and any(data.startswith(h, cut) for h in heads):
            k -= 1
        if k != data.count(b"\n", nl, cut - 1):
            return None
        self.stripped += k
        start = rep.find(b"\n", pos)
        return rep[start : rep.rfind(b"\n") + 1]

    def _lines_of(self, data: bytes, start: int, stop: int) -> bytes:
        """``data[start:stop]`` (from a newline to a newline) rewritten: platform lines dropped,
        prefixes stripped, each in one C-speed pass over the chunk read in place (a memoryview: a
        copy of a large chunk costs more than the pass, in page faults)."""
        if stop - start <= 1:
            return data[start:stop]
        src: bytes | memoryview
        if data.find(b"\x1b", start, stop) != -1:
            src = strip_ansi(data[start:stop])
        else:
            src = memoryview(data)[start:stop]
        n = data.count(b"\n", start, stop)
        dropped = stripped = 0
        if self._drop is not None:
            src = self._drop.sub(b"\n", src)
            dropped = n - src.count(b"\n")
        if self._strip is None:
            out = bytes(src)
        else:
            out, stripped = self._strip.subn(b"\n", src)
            lines = n - dropped - 1
            if self._relearn and lines >= 8 and stripped * 2 < lines:
                self._relearn -= 1
                if self._adapt(bytes(src)):
                    return self._lines_of(data, start, stop)
        self.dropped += dropped
        self.stripped += stripped
        return out

    def _adapt(self, whole: bytes) -> bool:
        """Most lines of a chunk kept their prefix: learn from it again (a new stream's shape)."""
        self._starts = 0
        self._at0 = 0
        self._cands.clear()
        self._plats.clear()
        self._sample.clear()
        self._lines = 0
        self._learn(whole, 0, LEARN_LINES)
        return self._use(self._decide())

    # -- split lines (a viewer's LineSplitter): the same decisions, taken line by line -----------
    def feed_lines(self, lines: Iterable[Line]) -> list[Line]:
        """The Lines the analyzer should read for ``lines`` (renumbered past dropped platform lines)."""
        self.lines_fed = True
        out: list[Line] = []
        for line in lines:
            if not self._learning:
                self._rewrite_line(line, out)
                continue
            if line.number != self._number:
                if self._phys:
                    self._observe("\r".join(self._phys).encode())
                    self._phys = []
                    if self._settled():
                        self._end_learning_lines(out)
                        self._rewrite_line(line, out)
                        continue
                self._phys_free = self._free_line(line.text.encode())
            self._phys.append(line.text)
            self._number = line.number
            if self._phys_free:
                # a bare log's line, given out before the decision (with the lines held before it)
                out.extend(self._held_lines)
                self._held_lines.clear()
                out.append(line)
                self._released_number = line.number
            else:
                self._held_lines.append(line)
        return out

    def finish_lines(self) -> list[Line]:
        """End of the stream (split lines): what is still held, rewritten."""
        out: list[Line] = []
        if self._learning:
            if self._phys:
                self._observe("\r".join(self._phys).encode())
                self._phys = []
            self._end_learning_lines(out)
        if self._dropping:
            self._dropping = False  # the last line was a platform line
            self.dropped += 1
        return out

    def _end_learning_lines(self, out: list[Line]) -> None:
        self._learning = False
        held, self._held_lines = self._held_lines, []
        self._number = self._released_number  # a line given out in part goes on as it began
        if not self._use(self._decide()):
            self.bare = True
            out.extend(held)
            return
        for line in held:
            self._rewrite_line(line, out)

    def _rewrite_line(self, line: Line, out: list[Line]) -> None:
        text = line.text
        if line.number != self._number:
            # a physical line starts: a platform line is dropped whole, a prefix stripped
            if self._dropping:
                self._gone += 1
                self.dropped += 1
            self._number = line.number
            raw = text.encode()
            self._dropping = self._drop is not None and self._drop_line.fullmatch(raw) is not None
            if not self._dropping and self._lead is not None and (m := self._lead.match(raw)) is not None:
                self.stripped += 1
                text = raw[m.end() :].decode("utf-8", "replace")
        elif self._dropping:
            return
        if self._dropping:
            return
        out.append(replace(line, text=text, number=line.number - self._gone) if text is not line.text or self._gone else line)

    # -- answer ---------------------------------------------------------------------------------
    def value(self) -> LinePrefix | None:
        """What was learnt and stripped (None when the log has no prefix)."""
        if self.bare or (not self._shapes and not self._plat_shapes):
            return None
        examples = [e for s in self._shapes for e in self._examples.get(s, [])]
        return LinePrefix(
            shapes=tuple(s.decode() for s in self._shapes),
            examples=tuple(examples[:8]),
            platform_shapes=tuple(s.decode() for s in self._plat_shapes),
            stripped=self.stripped,
            dropped=self.dropped,
        )
