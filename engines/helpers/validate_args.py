"""Host-side argument check for servelab: an engine's own code judges the server flags, no weights load.

This file is only the frame. Each engine's part is one file beside its adapter
(``engines/adapters/vllm_argcheck.py``, ``engines/adapters/sglang_argcheck.py``), named by the adapter's
``validation().check``. servelab sends this frame as ``python -c`` and, on stdin, one JSON request
``{"engine", "check": <the engine file's text>, "file", "flags"}``. The frame runs the engine file,
which defines ``check(flags) -> list[str]`` (warnings) and raises :class:`Failed` to reject.

It prints one JSON object: ``{"ok", "engine", "stage", "by", "message", "detail", "warnings",
"seconds"}``. ``stage`` says where it failed (``import``, ``parse``, ``config``: the engine's own
checks; ``servelab``: servelab's checks for what the engine lets through; ``select``: no usable
check file) and ``message`` is that party's words on one line. Standard library only; runs with
the engine's interpreter.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

if sys.path and sys.path[0] in ("", "."):
    del sys.path[0]  # `python -c` puts the working folder first: never import from it


class Failed(Exception):
    """The flags were rejected at ``stage`` (``by`` the engine, or by servelab's own checks)."""

    def __init__(self, stage: str, message: str, detail: str = "", by: str = "engine") -> None:
        super().__init__(message)
        self.stage = stage
        self.message = message
        self.detail = detail
        self.by = by


def one_line(exc: BaseException) -> str:
    """An exception in one line; pydantic-style errors as ``field: message`` pairs."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            parts = []
            for e in errors():
                loc = ".".join(str(x) for x in e.get("loc", ()) if x != "__root__")
                parts.append(f"{loc}: {e.get('msg', '')}" if loc else str(e.get("msg", "")))
            title = getattr(exc, "title", "") or type(exc).__name__
            if parts:
                return f"{title}: " + "; ".join(parts)
        except Exception:
            pass
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def run_argparse(parse: Callable[[list[str]], Any], flags: list[str]) -> Any:
    """Call ``parse(flags)``; argparse's exit becomes Failed("parse", its error line)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parse(flags)
    except SystemExit as exc:
        text = err.getvalue()
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        error_lines = [ln for ln in lines if "error:" in ln]
        message = error_lines[-1] if error_lines else (lines[-1] if lines else f"parser exited with {exc.code}")
        hints = [ln for ln in lines if not ln.startswith(("usage:", "[")) and ln != message and "error:" not in ln]
        raise Failed("parse", message, "\n".join(hints[-3:])) from None


def validate(request: dict[str, Any]) -> dict[str, Any]:
    """Run one engine's check file on ``request["flags"]``; the answer servelab reads."""
    started = time.monotonic()
    flags = [str(f) for f in request.get("flags") or []]
    engine = str(request.get("engine") or "?")
    answer: dict[str, Any] = {
        "ok": False, "engine": engine, "stage": None, "by": None, "message": "", "detail": "",
        "warnings": [], "flags": flags,
    }
    namespace: dict[str, Any] = {"__name__": "servelab_argcheck", "Failed": Failed, "one_line": one_line, "run_argparse": run_argparse}
    try:
        exec(compile(str(request.get("check") or ""), str(request.get("file") or "<check>"), "exec"), namespace)
        check = namespace.get("check")
        if not callable(check):
            raise Failed("select", f"the argument check for {engine!r} defines no check(flags)", by="servelab")
        answer["warnings"] = [str(w) for w in check(flags) or []]
        answer.update(ok=True, stage="done", message="accepted")
    except Failed as exc:
        answer.update(stage=exc.stage, by=exc.by, message=exc.message, detail=exc.detail)
    except SyntaxError as exc:
        answer.update(stage="select", by="servelab", message=f"the argument check for {engine!r} does not compile: {one_line(exc)}")
    except Exception as exc:  # a bug in a check file, not a verdict on the flags
        answer.update(stage="select", by="servelab", message=f"the argument check for {engine!r} crashed: {one_line(exc)}")
    answer["seconds"] = round(time.monotonic() - started, 3)
    return answer


def main() -> int:
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the engine's own logging goes to stderr, not into the answer
    try:
        request = json.loads(sys.stdin.read() or "{}")
    except ValueError as exc:
        request = None
        answer: dict[str, Any] = {"ok": False, "stage": "select", "by": "servelab", "message": f"bad request: {exc}"}
    if isinstance(request, dict):
        answer = validate(request)
    out.write(json.dumps(answer) + "\n")
    out.flush()
    return 0 if answer["ok"] else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip the engine's interpreter teardown (threads, atexit): ~2 s of a cold check
