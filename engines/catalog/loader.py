"""Turn the bytes of a TOML definition into a validated model or ``FILE:LINE: key.path: message`` lines.

Whatever bytes a file holds, the result is a list of :class:`~engines.errors.Problem`, never an
exception: a broken file on the operator's shared screen must not take the dashboard down.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from servelab.engines.errors import Problem

M = TypeVar("M", bound=BaseModel)

_AT_LINE = re.compile(r"\(at line (\d+), column (\d+)\)")
_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(r"""^\s*("[^"]*"|'[^']*'|[A-Za-z0-9_.\- "']+?)\s*=""")


def _split_key(raw: str) -> list[str]:
    parts: list[str] = []
    for piece in re.findall(r'"[^"]*"|\'[^\']*\'|[^.]+', raw):
        piece = piece.strip()
        if piece[:1] in "\"'":
            piece = piece[1:-1]
        if piece:
            parts.append(piece)
    return parts


def locate(text: str, path: tuple[str | int, ...]) -> int:
    """Best line (1-based) for a key path in TOML text; the nearest enclosing table if the key is absent."""
    want = [str(p) for p in path if not isinstance(p, int)]
    best, best_len = 1, 0
    table: list[str] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            table = _split_key(header.group(1))
            full = table
        else:
            key = _KEY.match(line)
            if not key:
                continue
            full = table + _split_key(key.group(1))
        # how much of the wanted path this line covers
        n = 0
        while n < min(len(full), len(want)) and full[n] == want[n]:
            n += 1
        if n == len(full) and n > best_len:
            best, best_len = lineno, n
            if n == len(want):
                return lineno
    return best


def decode(data: bytes, file: str) -> tuple[str | None, list[Problem]]:
    """Bytes to text; a file that is not UTF-8 is one problem on the line of the first bad byte."""
    try:
        return data.decode("utf-8"), []
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        return None, [Problem(file, line, "<file>", f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})")]


def parse_toml(data: bytes, file: str) -> tuple[dict[str, Any] | None, str, list[Problem]]:
    """Parse TOML; on failure return the problem with the parser's line."""
    text, problems = decode(data, file)
    if text is None:
        return None, "", problems
    try:
        return tomllib.loads(text), text, []
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = _AT_LINE.search(msg)
        line = int(m.group(1)) if m else 1
        msg = _AT_LINE.sub("", msg).strip()
        col = f" at column {m.group(2)}" if m else ""
        return None, text, [Problem(file, line, "<toml>", f"{msg}{col}")]
    except (ValueError, RecursionError) as exc:  # e.g. NUL characters, absurd nesting
        return None, text, [Problem(file, 1, "<toml>", f"not valid TOML: {exc.__class__.__name__}")]


def _dotted(loc: tuple[str | int, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out or "<root>"


def validation_problems(exc: ValidationError, text: str, file: str, prefix: tuple[str, ...] = ()) -> list[Problem]:
    """One problem per pydantic error, with the key path a user wrote and its line."""
    problems: list[Problem] = []
    for err in exc.errors(include_url=False):
        loc = tuple(prefix) + tuple(p for p in err["loc"] if not (isinstance(p, str) and "[" in p))
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        elif err["type"] == "missing":
            msg = "required key is missing"
        problems.append(Problem(file, locate(text, loc), _dotted(loc), msg))
    return problems


def load_model(model: type[M], data: dict[str, Any], text: str, file: str) -> tuple[M | None, list[Problem]]:
    """Validate parsed TOML against a model."""
    try:
        return model.model_validate(data), []
    except ValidationError as exc:
        return None, validation_problems(exc, text, file)


def display_path(path: Path, base: Path | None = None) -> str:
    """A short path for messages: relative to ``base`` or the working directory when possible."""
    for root in (base, Path.cwd()):
        if root is None:
            continue
        try:
            return str(path.resolve().relative_to(root.resolve()))
        except ValueError:
            continue
    return str(path)
