"""The training text every machine has: the Python standard library of the interpreter that builds.

Prose is ``pydoc_data/topics.py`` (the language reference's topics, ~750 kB of English with code
examples), read as data through ``ast`` (never imported or run). Code is a fixed list of pure-Python
stdlib modules, as code alone (no docstrings, no comments: ``code_only``). Both are pinned by SHA-256: another Python release changes the bytes, so the build
stops with one line instead of training different models under the same stamp.
"""

from __future__ import annotations

import ast
import hashlib
import re
import sysconfig
from dataclasses import dataclass
from pathlib import Path

#: topics.py of CPython 3.11.7, the interpreter the engine environment is built with.
PROSE_FILE = "pydoc_data/topics.py"
PROSE_SHA256 = "abaa56a64551d8ee"
#: Pure-Python modules that make the code domain (their first 16 hex digits of SHA-256 are pinned
#: together, in this order).
CODE_SHA256 = "1bdabf6cb84ed722"
CODE_FILES = (
    "textwrap.py", "string.py", "shlex.py", "fnmatch.py", "glob.py", "bisect.py", "heapq.py",
    "calendar.py", "colorsys.py", "difflib.py", "json/decoder.py", "json/encoder.py", "csv.py",
    "configparser.py", "argparse.py", "dataclasses.py", "enum.py", "functools.py", "statistics.py",
    "fractions.py", "pprint.py", "queue.py", "sched.py", "graphlib.py", "ipaddress.py",
)


class CorpusMismatch(Exception):
    """The standard library here is not the pinned one."""


@dataclass(frozen=True)
class Corpus:
    prose: tuple[str, ...]
    code: tuple[str, ...]
    digest: str


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


#: The slice the target learns: the first texts (in the pinned order) up to this many characters
#: of each domain. A 4-layer model trained for two minutes on two cores can learn ~60 kB well
#: enough to write text rather than loop; on the whole library it loops.
SLICE_CHARS = 30_000


def _head(texts: tuple[str, ...], chars: int) -> tuple[str, ...]:
    out: list[str] = []
    total = 0
    for t in texts:
        if total >= chars:
            break
        out.append(t)
        total += len(t)
    return tuple(out)


def sliced(c: Corpus, chars: int = SLICE_CHARS) -> Corpus:
    return Corpus(_head(c.prose, chars), _head(c.code, chars), c.digest)


def load(code_digest: str | None = CODE_SHA256) -> Corpus:
    """The pinned prose and code; raises CorpusMismatch on other bytes."""
    root = Path(sysconfig.get_paths()["stdlib"])
    prose_bytes = (root / PROSE_FILE).read_bytes()
    if _digest(prose_bytes) != PROSE_SHA256:
        raise CorpusMismatch(f"{root / PROSE_FILE} is not the pinned one (sha256 {_digest(prose_bytes)}, want {PROSE_SHA256}): build with CPython 3.11.7")
    tree = ast.parse(prose_bytes)
    topics: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and isinstance(v, ast.Constant) and isinstance(v.value, str):
                    topics[str(k.value)] = v.value
    prose = tuple(topics[k] for k in sorted(topics))
    code_parts = [(root / f).read_bytes() for f in CODE_FILES]
    got = _digest(b"\0".join(code_parts))
    if code_digest is not None and got != code_digest:
        raise CorpusMismatch(f"the stdlib modules {', '.join(CODE_FILES[:3])}... differ from the pinned ones (sha256 {got}, want {code_digest})")
    code = tuple(code_only(p.decode()) for p in code_parts)
    return Corpus(prose, code, _digest(prose_bytes + got.encode()))


_DEF = re.compile(r"\n([ \t]*)(def |class |async def |@)")


def code_only(source: str) -> str:
    """The module as code alone: docstrings dropped and comments gone (``ast.unparse``), so the
    code domain holds no English; a blank line before each definition keeps them paragraphs."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                node.body = body[1:] or [ast.Pass()]
    text = ast.unparse(tree)
    return _DEF.sub(lambda m: "\n\n" + m.group(1) + m.group(2), text).replace("\n\n\n", "\n\n")
