"""What a traceback's own lines say, one line at a time: a caret line, a cut traceback's last code
line and the exception it raises, an exception message that is only a quoted key and the later message
that restates it, a C++ record's text without its header."""

from __future__ import annotations

import re

__all__ = ["bare_key", "cpp_record_text", "is_caret", "last_code", "raised_name", "restates"]

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


#: A cut traceback's last code line that raises a named exception ("raise RuntimeError(", "raise errors.ConfigError(").
_RAISE = re.compile(r"raise (?P<exception>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure))\(")
#: A C++ runtime's record header (glog / c10), its tags after it: "[W1119 17:59:26.271588084 TCPStore.cpp:125] [c10d] ".
_CPP_HEAD = re.compile(r"^(?:\[rank\d+\]:)?\[[IWEF]\d{4} [\d:.]+ (?:\d+ )?[\w.-]+:\d+\] (?:\[[^\]]*\] )*")


def raised_name(code: str) -> str | None:
    """The exception a frame's code line raises by name ("raise RuntimeError(" -> "RuntimeError"), else None."""
    m = _RAISE.match(code)
    return m["exception"] if m is not None else None


def cpp_record_text(record: str) -> str:
    """A C++ runtime's record without its header and tags (the text as a message says it)."""
    return _CPP_HEAD.sub("", record)
