"""The ``servelab`` command. With no arguments it opens the dashboard.

Each command group lives in ``tui/commands/<group>.py`` with a ``register(subparsers)`` function;
this module only wires them together and turns every expected error into one line on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from collections.abc import Sequence
from typing import NoReturn

from servelab.engines.errors import ServelabError

#: Command groups, in the order ``--help`` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "servelab.tui.commands.experiments",
    "servelab.tui.commands.analyze",
    "servelab.tui.commands.runs",
    "servelab.tui.commands.rehearse",
    "servelab.tui.commands.probe",
    "servelab.tui.commands.diagnose",
    "servelab.tui.commands.preflight",
    "servelab.tui.commands.campaign",
    "servelab.tui.commands.drafter",
    "servelab.tui.commands.gpus",
    "servelab.tui.commands.history",
)


#: Which module registers each command, so ``servelab analyze LOG`` imports the analyze command
#: alone (importing all of them cost 0.4 s CPU before the first byte was read).
#: tests/test_cli_dispatch.py holds it equal to what the modules register.
COMMAND_MODULE: dict[str, str] = {
    "list": "servelab.tui.commands.experiments",
    "show": "servelab.tui.commands.experiments",
    "check": "servelab.tui.commands.experiments",
    "analyze": "servelab.tui.commands.analyze",
    "launch": "servelab.tui.commands.runs",
    "runs": "servelab.tui.commands.runs",
    "status": "servelab.tui.commands.runs",
    "nodes": "servelab.tui.commands.runs",
    "logs": "servelab.tui.commands.runs",
    "stop": "servelab.tui.commands.runs",
    "cleanup": "servelab.tui.commands.runs",
    "rehearse": "servelab.tui.commands.rehearse",
    "probe": "servelab.tui.commands.probe",
    "compare": "servelab.tui.commands.probe",
    "ab": "servelab.tui.commands.probe",
    "diagnose": "servelab.tui.commands.diagnose",
    "preflight": "servelab.tui.commands.preflight",
    "patches": "servelab.tui.commands.preflight",
    "campaign": "servelab.tui.commands.campaign",
    "drafter": "servelab.tui.commands.drafter",
    "gpus": "servelab.tui.commands.gpus",
    "history": "servelab.tui.commands.history",
}


class _Parser(argparse.ArgumentParser):
    """argparse that reports a wrong flag in one line and exits 2, without the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (try: {self.prog} --help)\n")


def _command_in(argv: Sequence[str]) -> str | None:
    """The command word of ``argv`` (the first word that is not ``--dir``'s or an option)."""
    it = iter(argv)
    for word in it:
        if word == "--dir":
            next(it, None)
        elif not word.startswith("-"):
            return word
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The whole parser; given ``argv`` naming a known command, only that command's module."""
    parser = _Parser(prog="servelab", description="LLM serving experiments: vLLM vs SGLang, patches, speculative decoding, over SSH.")
    parser.add_argument("--dir", help="experiments folder (default: $SERVELAB_EXPERIMENTS or ./experiments)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    one = COMMAND_MODULE.get(_command_in(argv) or "") if argv is not None else None
    for name in (one,) if one is not None else COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    dash = sub.add_parser("dashboard", help="open the dashboard (the default)")
    dash.add_argument("--readonly", action="store_true", help="hide launch and stop: for someone watching")
    dash.set_defaults(func=_dashboard)
    return parser


def _dashboard(args: argparse.Namespace) -> int:
    from servelab.tui.app import run_app  # Textual is imported only when the dashboard opens

    return run_app(folder=args.dir, readonly=getattr(args, "readonly", False))


def quiet_third_party_warnings() -> None:
    """Silence known third-party deprecation noise, by its category and its module only.

    The lock pins a quiet cryptography (51 deprecates DSA, which asyncssh 2.24.1 names at import);
    this filter keeps an install outside the lock quiet too. Nothing else is filtered.
    """
    try:
        from cryptography.utils import CryptographyDeprecationWarning
    except ImportError:  # pragma: no cover - asyncssh depends on cryptography
        return
    warnings.filterwarnings("ignore", category=CryptographyDeprecationWarning, module=r"asyncssh(\.|$)")


def main(argv: Sequence[str] | None = None) -> int:
    quiet_third_party_warnings()
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(words)
    args = parser.parse_args(words)
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
