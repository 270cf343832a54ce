"""Host-side argument check for servelab: the engine's own parser judges the flags, no model is loaded.

``python -c <this file> PARSER FLAG...`` (PARSER: ``vllm`` or ``sglang``, chosen by the engine's
adapter) parses the server flags exactly as the server would, then builds the engine's config
object from them (vLLM: ``AsyncEngineArgs.create_engine_config``, which reads the model's
config.json but no weights and validates ``--speculative-config``; SGLang: ``ServerArgs``, whose
``__post_init__`` checks the combination). It prints one JSON object:
``{"ok", "parser", "stage", "message", "detail", "seconds"}`` where ``stage`` says where it failed
(``import``, ``parse`` or ``config``) and ``message`` is the engine's own words on one line.
Standard library only; runs with the engine's interpreter.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time

if sys.path and sys.path[0] in ("", "."):
    del sys.path[0]  # `python -c` puts the working folder first: never import from it


class Failed(Exception):
    """The engine rejected the flags at ``stage``."""

    def __init__(self, stage: str, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.stage = stage
        self.message = message
        self.detail = detail


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


def run_argparse(parse, flags: list[str]):
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


def vllm_parser(flags: list[str]) -> None:
    """vLLM's server parser (``make_arg_parser``), its quick checks, then the engine config."""
    try:
        try:
            from vllm.entrypoints.launchers.cli_args import make_arg_parser  # 0.30 and later
        except ImportError:
            from vllm.entrypoints.openai.cli_args import make_arg_parser  # before
        try:
            from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args
        except ImportError:
            try:
                from vllm.entrypoints.openai.cli_args import validate_parsed_serve_args
            except ImportError:
                validate_parsed_serve_args = None
        try:
            from vllm.utils.argparse_utils import FlexibleArgumentParser
        except ImportError:
            from vllm.utils import FlexibleArgumentParser  # type: ignore[attr-defined,no-redef]
        from vllm.engine.arg_utils import AsyncEngineArgs
    except Exception as exc:
        raise Failed("import", f"cannot import vLLM's argument parser: {one_line(exc)}") from None
    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve", description="vLLM server"))
    args = run_argparse(parser.parse_args, flags)
    try:
        if validate_parsed_serve_args is not None:
            validate_parsed_serve_args(args)
        AsyncEngineArgs.from_cli_args(args).create_engine_config()
    except SystemExit as exc:
        raise Failed("config", f"vLLM exited while checking the configuration (code {exc.code})") from None
    except Exception as exc:
        raise Failed("config", one_line(exc)) from None


def sglang_parser(flags: list[str]) -> None:
    """SGLang's ``prepare_server_args`` (or, in older releases, ``ServerArgs.add_cli_args`` + ``from_cli_args``)."""
    try:
        from sglang.srt import server_args as sa
    except Exception as exc:
        raise Failed("import", f"cannot import SGLang's server arguments: {one_line(exc)}") from None
    prepare = getattr(sa, "prepare_server_args", None)
    if prepare is not None:
        parse = prepare
    else:
        import argparse

        def parse(argv: list[str]):
            parser = argparse.ArgumentParser(prog="sglang.launch_server")
            sa.ServerArgs.add_cli_args(parser)
            return sa.ServerArgs.from_cli_args(parser.parse_args(argv))

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parse(flags)
    except SystemExit as exc:
        lines = [ln.strip() for ln in err.getvalue().splitlines() if ln.strip()]
        error_lines = [ln for ln in lines if "error:" in ln]
        message = error_lines[-1] if error_lines else (lines[-1] if lines else f"parser exited with {exc.code}")
        raise Failed("parse", message) from None
    except Exception as exc:
        raise Failed("config", one_line(exc)) from None


#: The engine-specific part, chosen by the adapter's ``validation().parser``.
PARSERS = {"vllm": vllm_parser, "sglang": sglang_parser}


def validate(parser_name: str, flags: list[str]) -> dict:
    started = time.monotonic()
    answer = {"ok": False, "parser": parser_name, "stage": None, "message": "", "detail": "", "flags": flags}
    parse = PARSERS.get(parser_name)
    if parse is None:
        answer.update(stage="select", message=f"no argument parser for {parser_name!r} (known: {', '.join(sorted(PARSERS))})")
    else:
        try:
            parse(flags)
            answer.update(ok=True, stage="done", message="accepted")
        except Failed as exc:
            answer.update(stage=exc.stage, message=exc.message, detail=exc.detail)
    answer["seconds"] = round(time.monotonic() - started, 3)
    return answer


def main(argv: list[str]) -> int:
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the engine's own logging goes to stderr, not into the answer
    if len(argv) < 2:
        answer = {"ok": False, "stage": "select", "message": "usage: validate_args.py PARSER FLAG..."}
    else:
        answer = validate(argv[1], argv[2:])
    out.write(json.dumps(answer) + "\n")
    out.flush()
    return 0 if answer["ok"] else 1


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip the engine's interpreter teardown (threads, atexit): ~2 s of a cold check
