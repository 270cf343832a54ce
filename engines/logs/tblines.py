"""What a traceback's own lines say, one line at a time: a caret line, a cut traceback's last code
line, and an exception message that is only a quoted key and the later message that restates it."""

from __future__ import annotations

import re

__all__ = ["bare_key", "is_caret", "last_code", "restates"]

#: An exception message that is only a quoted key or name (KeyError's "'gfx1101'").
_BARE_KEY = re.compile(r"(?P<q>['\"])(?P<key>[^\s'\"]{2,80})(?P=q)")


def is_caret(s: str) -> bool:
    """A line of ``^`` and ``~`` only: the marks under a frame's code."""
    t = s.strip()
    return bool(t) and not t.strip("^~ ")


def last_code(excerpt: list[str]) -> str:
    """The source line of a cut traceback's last frame ("raise Exception("), "" when the excerpt ends
    on a frame's ``File`` line."""
    lines = list(excerpt)
    while lines and is_caret(lines[-1]):
        lines.pop()  # the carets under the last frame's code
    if len(lines) < 2 or not lines[-2].startswith('File "'):
        return ""
    code = lines[-1].strip()
    return "" if not code or code.startswith('File "') else code[:80]


def bare_key(message: str) -> str | None:
    """The key a message is made of alone (``'gfx1101'`` -> ``gfx1101``), else None."""
    m = _BARE_KEY.fullmatch(message.strip())
    return m["key"] if m is not None else None


def restates(key: str, message: str) -> bool:
    """``message`` names ``key`` as a whole word and says more than the key itself."""
    if bare_key(message) == key:
        return False
    return re.search(rf"(?<![\w-]){re.escape(key)}(?![\w-])", message) is not None
