"""vLLM's host-side argument check: its server parser, its quick checks, then its engine config.

Runs on the host inside the frame ``engines/helpers/validate_args.py`` (which provides ``Failed``,
``one_line`` and ``run_argparse``), with the engine's interpreter: standard library and vLLM only.
``AsyncEngineArgs.create_engine_config`` reads the model's config.json but no weights, and
validates ``--speculative-config``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servelab.engines.helpers.validate_args import Failed, one_line, run_argparse


def check(flags: list[str]) -> list[str]:
    """vLLM accepts ``flags`` (no warnings of servelab's own), else Failed in vLLM's words."""
    validate_parsed_serve_args: Any = None
    try:
        try:
            from vllm.entrypoints.launchers.cli_args import make_arg_parser  # 0.30 and later
        except ImportError:
            from vllm.entrypoints.openai.cli_args import make_arg_parser  # before
        try:
            from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args as quick_checks
        except ImportError:
            try:
                from vllm.entrypoints.openai.cli_args import validate_parsed_serve_args as quick_checks
            except ImportError:
                quick_checks = None
        validate_parsed_serve_args = quick_checks
        try:
            from vllm.utils.argparse_utils import FlexibleArgumentParser
        except ImportError:
            from vllm.utils import FlexibleArgumentParser
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
    return []
