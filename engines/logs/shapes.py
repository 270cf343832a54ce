"""The shape of a capture prefix and of a platform's own line: a line's leading text cut into tokens and
fields (each ending with its spaces), generalised to a regex that matches the same tool's other lines
(:func:`shape_of`), and the test for a line that is a platform's stamp and at most two names
(:func:`is_platform`). Used by :mod:`servelab.engines.logs.prefix`."""

from __future__ import annotations

import re

__all__ = ["MAX_PREFIX", "TOKEN", "WORD", "fields_of", "is_platform", "platform_shape", "shape_of", "strong"]

#: A prefix candidate longer than this is text, not a prefix.
MAX_PREFIX = 160
#: A platform line: a timestamp and one or two names, nothing else (no engine text; a stamp alone is a
#: blank line of the engine's behind a capture stamp, read as blank, never dropped). The names follow
#: the stamp after at most three spaces: further in, they are an indented line of the engine's text behind
#: a capture stamp (an exception's "        pid: 122894", a config dump's "    dtype: bf16").
_PLATFORM_NAME = rb"[.+:/@=-]*\w[\w.+:/@=-]*"
_PLATFORM = re.compile(
    rb"(?:[\w.+:/-]+ +){0,2}[\w.+:/-]*\d\d:\d\d:\d\d[\w.+:/-]*(?: {1,3}" + _PLATFORM_NAME + rb"(?: +" + _PLATFORM_NAME + rb")?) *\r?"
)
#: A name a platform never prints after its stamp: an exception's (a bare ``raise X`` prints "X").
_EXCEPTION_NAME = rb"[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)"
TOKEN = re.compile(rb"[\w.-]+| +|.", re.S)
WORD = rb"[\w.-]+"
_PLATFORM_WORD = rb"(?!" + _EXCEPTION_NAME + rb"\b)" + WORD


def fields_of(prefix: bytes) -> list[list[bytes]]:
    """The prefix's tokens grouped in fields, each ending with its run of spaces (the last maybe not)."""
    toks = TOKEN.findall(prefix)
    fields: list[list[bytes]] = [[]]
    for i, t in enumerate(toks):
        fields[-1].append(t)
        # a run of spaces ends a field before a word, or once the field has its punctuation
        # (padding before a separator, ``vllm-1  | ``, stays inside it)
        if t[:1] == b" " and i + 1 < len(toks) and (re.fullmatch(WORD, toks[i + 1]) or strong(fields[-1])):
            fields.append([])
    return fields


def strong(field: list[bytes]) -> bool:
    """A field with punctuation in it (``| ``, ``]: ``, a timestamp's colons), not only names."""
    return any(t[:1] != b" " and not re.fullmatch(WORD, t) for t in field)


def _render(field: list[bytes], last: bool) -> bytes:
    out = []
    for i, t in enumerate(field):
        if t[:1] == b" ":
            end = i == len(field) - 1
            if not end or (not last and not strong(field)):
                out.append(b" +")  # padding, or a space between names (``Dec  1``)
            else:
                out.append(re.escape(t))  # the space that ends the prefix: exact (indentation follows)
        elif re.fullmatch(WORD, t):
            out.append(WORD)
        else:
            out.append(re.escape(t))
    return b"".join(out)


def shape_of(prefix: bytes) -> bytes:
    """The regex a prefix generalises to: its fields up to the first with punctuation are required,
    the later ones optional, each only after the one before (a stamp some lines lack)."""
    fields = fields_of(prefix)
    while len(fields) > 1 and not strong(fields[-1]) and strong(fields[-2]) and fields[-2][-1][:2] == b"  ":
        # names after a separator and more than its one space are indented: the engine's text (a
        # frame glued behind the prefix, "vllm-1  |   File "), never a field of the prefix
        fields.pop()
        fields[-1] = [*fields[-1][:-1], b" "]
    n = len(fields)
    req = next((i for i, f in enumerate(fields) if strong(f)), n - 1) + 1
    # the spaces after a separator the optional fields follow are one exact space, the others the
    # next field's own (a second tool's ``  | `` behind ``vllm-1  | ``, on some lines only)
    lone = {i for i in range(req - 1, n - 1) if strong(fields[i]) and fields[i][-1][:1] == b" "}
    parts = [b" *" * (i - 1 in lone) + (_render(f[:-1], False) + b"\\ " if i in lone else _render(f, i == n - 1)) for i, f in enumerate(fields)]
    head = b"".join(parts[:req])
    # an optional level ends at a field with punctuation: a name alone is never stripped as one (the
    # first word of a line without the inner prefix, "Loading safetensors ...", looks just like it)
    levels: list[list[int]] = []
    run: list[int] = []
    for i in range(req, n):
        run.append(i)
        if strong(fields[i]):
            levels.append(run)
            run = []
    if run:
        if levels:
            levels[-1] += run
        else:
            levels.append(run)
    tail = b""
    for level in reversed(levels):
        tail = b"(?:" + b"".join(parts[i] for i in level) + tail + b")?"
    return head + tail


def is_platform(line: bytes) -> bool:
    """A platform's own line (a stamp and at most two names); one whose last name ends in a colon is a
    message's heading behind a stamp ("2026-01-05T10:00:00Z GPU Info:"), the engine's text."""
    return (
        len(line) <= MAX_PREFIX
        and _PLATFORM.fullmatch(line) is not None
        and line.rstrip(b" \r")[-1:] != b":"
        and re.search(rb" " + _EXCEPTION_NAME + rb" *\r?$", line) is None
    )


def platform_shape(line: bytes) -> bytes:
    # (a word is any word but an exception's name, so the engine's bare exception line is never dropped)
    return b"".join(b" +" if t[:1] == b" " else _PLATFORM_WORD if re.fullmatch(WORD, t) else re.escape(t) for t in TOKEN.findall(line.rstrip(b" \r")))
