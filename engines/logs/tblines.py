"""What a traceback's own lines say, one line at a time: a caret line, a cut traceback's last code
line and the exception it raises, an exception line (and Ray's that names its cause), an exception message that is only a quoted key and the later message
that restates it, a C++ record's text without its header."""

from __future__ import annotations

import re

__all__ = ["BARE_EXCEPTION", "CHAIN_MARKERS", "DEATH_REPORT", "EXCEPTION_LINE", "EXC_SUFFIXES", "FAULT_FRAME", "FRAME_LINE", "NATIVE_FRAME", "POINTS_ELSEWHERE", "REPR_WHOLE", "bare_key", "cpp_record_text", "exception_type", "is_caret", "last_code", "logging_call", "other_exception", "raised_name", "restates"]

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


#: An exception line of a class named without the usual suffix ("triton.runtime.errors.OutOfResources: ...").
_ANY_EXCEPTION = re.compile(r"(?P<module>(?:[a-z_]\w*\.)+)?(?P<name>[A-Z]\w*)(?:: ?(?P<text>.*))?$")
#: The class a code line raises, whatever its name ("raise OutOfResources(", "raise exc.Stop").
_RAISES = re.compile(r"raise (?:[A-Za-z_]\w*\.)*(?P<name>[A-Z]\w*)\b")


def other_exception(line: str, code: str) -> tuple[str, str] | None:
    """(type, message) of a line right after a traceback's last code line that ends the traceback
    with an exception whose name has no Error/Exception suffix: a dotted class in a module
    ("triton.runtime.errors.OutOfResources: out of resource"), or the class the code line raises."""
    m = _ANY_EXCEPTION.match(line)
    if m is None:
        return None
    raised = _RAISES.search(code)
    if m["module"] or (raised is not None and raised["name"] == m["name"]):
        return (m["module"] or "") + m["name"], m["text"] or ""
    return None


_LOG_CALL = re.compile(r"\b(?:log|logger|logging|LOGGER|_logger)\.(?:debug|info|warning|warn|error|exception|critical|fatal|log)\(")


def logging_call(code: str) -> bool:
    """A frame's code line that calls a logger ("logger.error(", "logging.warning(")."""
    return _LOG_CALL.search(code) is not None


#: ``Type: message`` at the start of a line (dotted module paths allowed). Ray re-raises a task's
#: exception as a class named after both, the cause in parentheses (``ray.exceptions.RayTaskError(
#: TimeoutError): ray::Actor.method() (pid=7, ...)``): the cause is the exception (:func:`exception_type`).
EXCEPTION_LINE = re.compile(
    r"(?P<type>(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning|Failure)|Exception|KeyboardInterrupt|AssertionError))"
    r"(?:\((?P<cause>(?:[A-Za-z_]\w*\.)*[A-Z]\w*)\))?"
    r"(?::\s?(?P<text>.*))?$"
)


def exception_type(m: re.Match[str]) -> str:
    """The exception an :data:`EXCEPTION_LINE` match names: a wrapper's cause when it names one."""
    return m["cause"] or m["type"]


FRAME_LINE = re.compile(r'\s*File "(?P<path>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>\S+))?')
#: An exception whose message reports that a process died with an exit code: a launcher's word on its
#: child ("Exception: Server process exited with code -9.", "RuntimeError: Rank 0 scheduler died during
#: initialization (exit code: -3)"). A stop's own code (0, 2, 15, -2, -15) is not a death.
DEATH_REPORT = re.compile(r"\b(?:died|exited|crashed|terminated)\b[^.]{0,60}?\b(?:exit )?code:? ?(?!-?(?:0|2|15)\b)-?\d+")
#: An exception raised with no message prints its type alone: "asyncio.exceptions.TimeoutError".
BARE_EXCEPTION = re.compile(r"(?:[a-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)")
#: An exception whose message sends the reader elsewhere for the root cause only wraps it, whatever
#: the engine: "Engine process failed to start. See stack trace for the root cause.", "See root cause above".
POINTS_ELSEWHERE = re.compile(r"\b(?:[Ss]ee|[Cc]heck)\b[^.\n]{0,40}\broot cause\b|\broot cause (?:is )?above\b")
#: A native crash report's symbolised C++ frame (PyTorch's signal handler): not a Python traceback's.
NATIVE_FRAME = 'File "<unknown>", line 0'
#: A frame as faulthandler prints it (a native crash's dump: no comma before "in", no code line after it).
FAULT_FRAME = re.compile(r'File "[^"]*", line \d+ in \S+')
#: The lines that chain one traceback to the next.
CHAIN_MARKERS = (
    "During handling of the above exception, another exception occurred",
    "The above exception was the direct cause of the following exception",
)
#: An exception's repr as a whole record: ``AssertionError()``, ``ValueError('bad value')``.
REPR_WHOLE = re.compile(r"(?P<exception>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))\((?P<q>['\"]?)(?P<message>.*?)(?P=q)\)")
#: An ERROR record that is only "Type: message" counts as an exception line when its type looks like one.
EXC_SUFFIXES = ("Error", "ption", "rrupt", "ilure")
