"""The ``servelab`` command. With no arguments it opens the dashboard.

Each command group lives in ``tui/commands/<group>.py`` with a ``register(subparsers)`` function;
this module only wires them together and turns every expected error into one line on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from engines.errors import ServelabError

#: Command groups, in the order ``--help`` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "tui.commands.experiments",
    "tui.commands.analyze",
    "tui.commands.runs",
    "tui.commands.probe",
    "tui.commands.diagnose",
    "tui.commands.preflight",
    "tui.commands.campaign",
    "tui.commands.drafter",
)


class _Parser(argparse.ArgumentParser):
    """argparse that reports a wrong flag in one line and exits 2, without the usage block."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message} (try: {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="servelab", description="LLM serving experiments: vLLM vs SGLang, patches, speculative decoding, over SSH.")
    parser.add_argument("--dir", help="experiments folder (default: $SERVELAB_EXPERIMENTS or ./experiments)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    dash = sub.add_parser("dashboard", help="open the dashboard (the default)")
    dash.add_argument("--readonly", action="store_true", help="hide launch and stop: for someone watching")
    dash.set_defaults(func=_dashboard)
    return parser


def _dashboard(args: argparse.Namespace) -> int:
    from tui.app import run_app  # Textual is imported only when the dashboard opens

    return run_app(folder=args.dir, readonly=getattr(args, "readonly", False))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        args.readonly = False
        args.func = _dashboard
    try:
        return int(args.func(args) or 0)
    except ServelabError as exc:
        print(f"servelab: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("servelab: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug of ours: still one line, the traceback only on request
        if os.environ.get("SERVELAB_DEBUG"):
            raise
        print(f"servelab: internal error: {exc.__class__.__name__}: {exc} (SERVELAB_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 70


if __name__ == "__main__":
    sys.exit(main())
