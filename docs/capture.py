"""Regenerate docs/img/experiments-120x36.svg, the README's picture of the dashboard.

    PYTHONPATH=$PWD .venv/bin/python docs/capture.py [OUT.svg]
    PYTHONPATH=$PWD .venv/bin/python docs/capture.py --screens

``--screens`` puts the experiments, run, compare and diagnosis screens at 80x24 and 120x36 under
docs/img/screens/ (``run-80x24.svg``...): the captures ``tests/test_tui_snapshots.py`` checks on every test
run (real replayed runs, probed, fixed start times), copied as they are, so a picture in docs/ is
one the suite holds true; ``tests/test_docs.py`` fails when a copy differs from its snapshot.

It opens the real dashboard (``ServelabApp``, under a Textual Pilot at 120x36) on a scratch copy of
the bundled tiny experiments (``experiments/tiny-cpu-*.toml`` and the hosts they name), laid out
like a checkout at ``/tmp/servelab`` (its ``.venv-engine``, ``.venv-sglang`` and model files link to
this checkout's), with servelab's state, cache, config and run folders inside the scratch copy: so
no earlier run, host memory or keymap of this machine shows, and the picture is the same on every
machine. It highlights ``tiny-cpu-vllm-ngram`` and saves the app's own screenshot (SVG). Nothing is
launched and no host but this machine is asked.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "img" / "experiments-120x36.svg"
#: Where the scratch checkout lives: a fixed path, because the detail pane shows absolute paths.
SCRATCH = Path("/tmp/servelab")
MARKER = ".servelab-docs-capture"
SIZE = (120, 36)
HIGHLIGHT = "tiny-cpu-vllm-ngram"
LINKED = (".venv-engine", ".venv-sglang")
#: The model folder is a real folder of linked files: a folder symlink would show its target's path.
MODELS = ".models"


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"hosts.toml value {value!r} is not a plain TOML value")


def make_scratch() -> Path:
    """The scratch checkout; returns its experiments folder."""
    if SCRATCH.exists():
        if not (SCRATCH / MARKER).exists():
            raise SystemExit(f"{SCRATCH} exists and is not this script's scratch copy: move it away first")
        shutil.rmtree(SCRATCH)
    folder = SCRATCH / "experiments"
    folder.mkdir(parents=True)
    (SCRATCH / MARKER).touch()
    for name in LINKED:
        (SCRATCH / name).symlink_to(REPO / name)
    for model in sorted((REPO / MODELS).glob("*/")):
        (SCRATCH / MODELS / model.name).mkdir(parents=True)
        for file in model.iterdir():
            (SCRATCH / MODELS / model.name / file.name).symlink_to(file.resolve())
    src = REPO / "experiments"
    named: set[str] = set()
    for exp in sorted(src.glob("tiny-cpu-*.toml")):
        shutil.copy2(exp, folder / exp.name)
        data = tomllib.loads(exp.read_text(encoding="utf-8"))
        named |= {data.get("host", "local"), *data.get("hosts", [])}
    hosts = tomllib.loads((src / "hosts.toml").read_text(encoding="utf-8")).get("hosts", {})
    lines = ["# The hosts the bundled tiny experiments name (docs/capture.py's scratch copy)."]
    for name in sorted(named & set(hosts)):
        lines += ["", f"[hosts.{name}]", *(f"{key} = {_toml_value(value)}" for key, value in hosts[name].items())]
    (folder / "hosts.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def isolate() -> None:
    """servelab's per-user folders (runs of hosts without a workdir, seen.json, caches, keymap) in the scratch copy."""
    home = SCRATCH / "home"
    for var, sub in (("XDG_DATA_HOME", "data"), ("XDG_STATE_HOME", "state"), ("XDG_CACHE_HOME", "cache"), ("XDG_CONFIG_HOME", "config")):
        (home / sub).mkdir(parents=True, exist_ok=True)
        os.environ[var] = str(home / sub)
    os.environ["SERVELAB_STATE_DIR"] = str(home / "state" / "servelab")
    os.environ["SERVELAB_CACHE"] = str(home / "cache" / "servelab")
    os.environ["SERVELAB_KEYMAP"] = str(home / "config" / "keymap.toml")
    os.environ.pop("SERVELAB_THEME", None)


async def capture(out: Path) -> None:
    from servelab.tui.app import ServelabApp
    from servelab.tui.screens.experiments import ExperimentsScreen

    os.chdir(SCRATCH)  # the subtitle shows the folder as "experiments", as `make run` does
    app = ServelabApp(Path("experiments"))
    app.watch_runs = False  # one look at the hosts, no background polling: the picture is settled
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        for _ in range(300):
            await pilot.pause(0.05)
            busy = [w for w in app.workers if w.group in ("catalog", "latest") and w.is_running]
            if isinstance(screen, ExperimentsScreen) and screen.rows and not busy:
                break
        else:
            raise SystemExit("the experiments screen did not settle")
        assert isinstance(screen, ExperimentsScreen)
        row = next((r for r in screen.rows if r.name == HIGHLIGHT), None)
        if row is None:
            raise SystemExit(f"{HIGHLIGHT} is not among the bundled experiments")
        screen.select_row(row.key)
        await pilot.pause(0.5)
        svg = app.export_screenshot(title="servelab: the experiments screen (120x36)")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(svg, encoding="utf-8")


#: docs/img name -> the snapshot test that draws that screen.
SCREENS = {"experiments": "test_experiments_screen", "run": "test_run_screen", "compare": "test_compare_screen", "diagnosis": "test_why_screen"}
SCREEN_SIZES = ("80x24", "120x36")
SNAPSHOTS = REPO / "tests" / "__snapshots__" / "test_tui_snapshots"


def screen_captures() -> dict[Path, Path]:
    """docs/img/screens/<screen>-<size>.svg -> the snapshot it copies."""
    return {REPO / "docs" / "img" / "screens" / f"{name}-{size}.svg": SNAPSHOTS / f"{test}[{size}].svg" for name, test in SCREENS.items() for size in SCREEN_SIZES}


def copy_screens() -> int:
    for out, snapshot in screen_captures().items():
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(snapshot, out)
        print(f"wrote {out.relative_to(REPO)} (from {snapshot.relative_to(REPO)})")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--screens"]:
        return copy_screens()
    out = Path(argv[0]).resolve() if argv else OUT
    make_scratch()
    isolate()
    try:
        asyncio.run(capture(out))
    finally:
        os.chdir(REPO)
        shutil.rmtree(SCRATCH, ignore_errors=True)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
