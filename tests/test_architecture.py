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


def test_the_tui_imports_no_private_name_of_the_core() -> None:
    """What tui/ needs of engines/ is public there: no ``from servelab.engines.x import _y``, nor
    ``import servelab.engines.x._y`` (a private module), nor ``engines_module._y`` through an alias."""
    offenders = []
    for path in (REPO / "tui").rglob("*.py"):
        aliases: set[str] = set()
        for node in ast.walk(_tree(path)):
            where = f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("servelab.engines"):
                module = node.module or ""
                offenders += [f"{where}: {module}.{a.name}" for a in node.names if a.name.startswith("_")]
                offenders += [f"{where}: {module}" for part in module.split(".") if part.startswith("_")]
                aliases.update(a.asname or a.name for a in node.names if not a.name.startswith("_"))
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("servelab.engines"):
                        offenders += [f"{where}: {a.name}" for part in a.name.split(".") if part.startswith("_")]
                        if a.asname:
                            aliases.add(a.asname)
        modules = {name for name in aliases if not name[:1].isupper()}  # modules by name (from servelab.engines.logs import lines as _lines)
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
                if node.attr.startswith("_") and not node.attr.startswith("__"):
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value.id}.{node.attr}")
    assert offenders == []


def _engines_import_graph() -> dict[str, set[str]]:
    """``servelab.engines.*`` module -> the engines modules it imports: every import statement, at the top,
    under ``TYPE_CHECKING`` or inside a function (``from pkg import module`` names the module)."""
    files = {}
    for path in (REPO / "engines").rglob("*.py"):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        files["servelab." + ".".join(parts)] = path
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        for name in _imported_modules(path, package):
            while name and name not in files:
                name = name.rpartition(".")[0]
            if name and name != mod:
                graph[mod].add(name)
    return graph


def test_engines_has_no_import_circle() -> None:
    """No engines module reaches itself through imports, ``TYPE_CHECKING`` ones included (shared values
    live in the leaf ``engines/adapters/exchange.py``, not in a module that imports its users back)."""
    graph = _engines_import_graph()
    assert "servelab.engines.nodes.run" in graph and "servelab.engines.adapters.exchange" in graph
    reach: dict[str, set[str]] = {}
    for start in graph:
        seen: set[str] = set()
        todo = list(graph[start])
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo.extend(graph[m])
        reach[start] = seen
    circles = {tuple(sorted({m, *(o for o in reach[m] if m in reach[o])})) for m in graph if m in reach[m]}
    assert sorted(circles) == []
    assert graph["servelab.engines.adapters.exchange"] == set(), "engines/adapters/exchange.py is a leaf: it imports nothing of servelab"
