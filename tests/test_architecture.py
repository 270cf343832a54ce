"""The core stays Textual-free, so every feature works from the CLI and scripts."""

from __future__ import annotations

import ast
import subprocess
import sys

from tests.conftest import REPO


def test_no_module_in_engines_imports_textual_or_tui() -> None:
    offenders = []
    for path in (REPO / "engines").rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.relative_to(REPO)}: {n}" for n in names if n.split(".")[0] in ("textual", "tui")]
    assert offenders == []


def test_cli_commands_do_not_load_textual() -> None:
    """`servelab list` must stay fast and usable without the dashboard's imports."""
    code = "import sys; from tui.cli import main; main(['list', '--json']); print('textual' in sys.modules, file=sys.stderr)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip().splitlines()[-1] == "False"
