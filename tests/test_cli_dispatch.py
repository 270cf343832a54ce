"""The CLI imports only the module of the command it runs, and that shortcut never changes what runs."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

from servelab.tui.cli import COMMAND_MODULE, COMMAND_MODULES, build_parser


def _registered(module: str) -> set[str]:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    importlib.import_module(module).register(sub)
    return set(sub.choices)


def test_the_table_names_every_command_of_every_module_and_nothing_else() -> None:
    found = {command: module for module in COMMAND_MODULES for command in _registered(module)}
    assert found == COMMAND_MODULE


def test_a_known_command_builds_only_its_module_and_parses_the_same() -> None:
    argv = ["--dir", "experiments", "analyze", "x.log", "--json"]
    small, full = build_parser(argv), build_parser()
    assert set(small._subparsers._group_actions[0].choices) == {"analyze", "dashboard"}  # type: ignore[union-attr]
    assert vars(small.parse_args(argv)) == vars(full.parse_args(argv))


def test_analyze_does_not_import_the_other_commands() -> None:
    code = "import sys; from servelab.tui.cli import main; main(['analyze', '/nonexistent.log']); print(sorted(m for m in sys.modules if m.startswith('servelab.tui.commands.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "['servelab.tui.commands.analyze']", out.stdout + out.stderr
    assert "no such file" in out.stderr


def test_an_unknown_or_missing_command_still_gets_the_whole_help() -> None:
    for argv in (["nosuch"], ["--dir", "x"], []):
        assert set(COMMAND_MODULE) <= set(build_parser(argv)._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
