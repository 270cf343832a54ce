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
            offenders += [f"{path.relative_to(REPO)}: {n}" for n in names if n.split(".")[0] == "textual" or n.split(".")[:2] == ["servelab", "tui"]]
    assert offenders == []


def test_every_import_of_servelab_goes_through_its_one_name() -> None:
    """``engines`` and ``tui`` are folders, not import names: code says ``servelab.engines`` / ``servelab.tui``."""
    offenders = []
    for top in ("engines", "tui", "bench", "tests"):
        for path in (REPO / top).rglob("*.py"):
            for node in ast.walk(_tree(path)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
                offenders += [f"{path.relative_to(REPO)}: {n}" for n in names if n.split(".")[0] in ("engines", "tui")]
    assert offenders == []


def test_cli_commands_do_not_load_textual() -> None:
    """`servelab list` must stay fast and usable without the dashboard's imports."""
    code = "import sys; from servelab.tui.cli import main; main(['list', '--json']); print('textual' in sys.modules, file=sys.stderr)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip().splitlines()[-1] == "False"


def _tree(path):  # type: ignore[no-untyped-def]
    return ast.parse(path.read_text(), filename=str(path))


def test_tests_never_import_other_test_files() -> None:
    """Shared helpers live in tests/fixtures/; bench scripts use those too."""
    offenders = []
    for path in [*(REPO / "tests").rglob("*.py"), *(REPO / "bench").glob("*.py")]:
        for node in ast.walk(_tree(path)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.relative_to(REPO)}: {n}" for n in names if n.startswith("tests.test_")]
    assert offenders == []


def test_the_tui_keeps_no_run_state_rules() -> None:
    """A run's state is a RunState decided in the core: tui/ never compares a ``.state`` to a spelled string."""
    offenders = []
    for path in (REPO / "tui").rglob("*.py"):
        for node in ast.walk(_tree(path)):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            spelled = any(
                isinstance(c, ast.Constant) and isinstance(c.value, str)
                for side in sides
                for c in ([side] if not isinstance(side, (ast.Tuple, ast.Set, ast.List)) else side.elts)
            )
            if spelled and any(isinstance(side, ast.Attribute) and side.attr == "state" for side in sides):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == []


def _imported_modules(path, package: str) -> list[str]:  # type: ignore[no-untyped-def]
    """Every module an ``import`` in ``path`` names (``from a import b`` names ``a`` and ``a.b``;
    relative imports resolved against ``package``), TYPE_CHECKING and function-level ones included."""
    names: list[str] = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            names += [base, *(f"{base}.{a.name}" for a in node.names)]
    return names


def test_screens_import_neither_the_app_nor_each_other() -> None:
    """A screen reaches the app through tui/face.py and opens another screen through tui/navigation.py
    (the app fills its routes): no module of tui/screens imports tui/app.py or another screen module."""
    screens = REPO / "tui" / "screens"
    own = {f"servelab.tui.screens.{p.stem}" for p in screens.glob("*.py") if p.stem != "__init__"}
    offenders = []
    for path in sorted(screens.glob("*.py")):
        me = f"servelab.tui.screens.{path.stem}"
        for name in _imported_modules(path, "servelab.tui.screens"):
            if name == "servelab.tui.app" or (name in own and name != me):
                offenders.append(f"{path.relative_to(REPO)}: {name}")
    assert offenders == []
