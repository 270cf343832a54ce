"""The app shell and the experiments screen, driven with Textual's pilot on a private folder."""

from __future__ import annotations

import io
import sys
from contextlib import asynccontextmanager
from pathlib import Path

from rich.console import Console

import pytest

from tests.fixtures.tui import TuiFolder, screen_text, wait_for
from servelab.tui.app import HIGH_CONTRAST, ServelabApp, known_binding_ids, run_app
from servelab.tui.screens.experiments import ExperimentsScreen
from servelab.tui.screens.help import HelpScreen
from servelab.engines.errors import ServelabError


def static_text(widget) -> str:  # type: ignore[no-untyped-def]
    """Plain text of a Static's rich content, rendered wide so nothing wraps."""
    console = Console(width=400, record=True, file=io.StringIO())
    console.print(widget.content)
    return console.export_text()


async def settle(app: ServelabApp, pilot) -> None:  # type: ignore[no-untyped-def]
    """Wait for the folder and latest-run workers."""
    await pilot.pause()
    for _ in range(100):
        if not [w for w in app.workers if w.group in ("catalog", "latest") and w.is_running]:
            break
        await pilot.pause(0.05)
    await pilot.pause()


@asynccontextmanager
async def settled(app: ServelabApp, size: tuple[int, int]):  # type: ignore[no-untyped-def]
    """The app running at ``size``, its folder and latest-run workers done."""
    async with app.run_test(size=size) as pilot:
        await settle(app, pilot)
        yield pilot


async def press(pilot, *keys: str) -> None:  # type: ignore[no-untyped-def]
    """Press ``keys``, then let the app draw."""
    await pilot.press(*keys)
    await pilot.pause()


async def test_lists_every_experiment_and_shows_the_resolved_command(tui_folder: TuiFolder) -> None:
    app = ServelabApp(tui_folder.folder)
    async with settled(app, (80, 24)) as pilot:
        text = screen_text(app)
        for name in ("tiny-cpu-vllm-ngram", "tiny-cpu-vllm-baseline", "kimi-k25-vllm-eagle3", "kimi-k25-sglang-eagle3"):
            assert name in text
        assert "ngram k=4" in text
        screen = app.screen
        assert isinstance(screen, ExperimentsScreen)
        screen.select_row(str(tui_folder.folder / "tiny-cpu-vllm-ngram.toml"))
        await pilot.pause()
        detail = static_text(screen.query_one("#experiment-detail-text"))
        assert "vllm.entrypoints.openai.api_server" in detail
        assert "prompt_lookup_max" in detail
        assert "tiny-cpu-vllm-baseline" in detail  # its baseline


async def test_invalid_file_shows_its_error_in_place_and_reload_picks_up_changes(tui_folder: TuiFolder) -> None:
    app = ServelabApp(tui_folder.folder)
    async with settled(app, (120, 30)) as pilot:
        (tui_folder.folder / "broken.toml").write_text('engine = "vllm"\nmodel = "m"\ntensr = 8\n')
        await pilot.press("r")
        await settle(app, pilot)
        text = screen_text(app)
        assert "broken" in text and "invalid" in text
        assert "tiny-cpu-vllm-ngram" in text  # the others stay listed
        screen = app.screen
        assert isinstance(screen, ExperimentsScreen)
        screen.select_row(str(tui_folder.folder / "broken.toml"))
        await pilot.pause()
        assert "tensr" in static_text(screen.query_one("#experiment-detail-text"))
        await press(pilot, "l")  # launching an invalid definition says why, in one line
        assert any("tensr" in n.message for n in app._notifications)


async def test_readonly_hides_launch_and_edit(tui_folder: TuiFolder) -> None:
    app = ServelabApp(tui_folder.folder, readonly=True)
    async with settled(app, (120, 24)) as pilot:
        footer = screen_text(app).splitlines()[-1]
        assert "Launch" not in footer and "Edit" not in footer
        assert "Preflight" in footer
        screen = app.screen
        assert screen.check_action("launch", ()) is False
    app = ServelabApp(tui_folder.folder, readonly=False)
    async with settled(app, (120, 24)) as pilot:
        assert "Launch" in screen_text(app).splitlines()[-1]


async def test_help_lists_keys_with_binding_ids_and_q_goes_back_then_quits(tui_folder: TuiFolder) -> None:
    app = ServelabApp(tui_folder.folder)
    async with settled(app, (80, 24)) as pilot:
        await press(pilot, "question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = screen_text(app)
        assert "experiments.launch" in text and "Keys" in text
        await press(pilot, "escape")
        assert isinstance(app.screen, ExperimentsScreen)
        await press(pilot, "q")
    assert app.return_value == 0


async def test_user_keymap_rebinds_and_bad_entries_are_reported(tui_folder: TuiFolder, tmp_path: Path) -> None:
    keymap = tmp_path / "config" / "keymap.toml"
    keymap.parent.mkdir(parents=True, exist_ok=True)
    keymap.write_text('[keys]\n"app.help" = "h"\n"no.such.binding" = "x"\n')
    app = ServelabApp(tui_folder.folder)
    async with settled(app, (80, 24)) as pilot:
        assert any("no.such.binding" in p for p in app.keymap_problems)
        await press(pilot, "h")
        assert isinstance(app.screen, HelpScreen)


async def test_high_contrast_theme_toggles(tui_folder: TuiFolder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVELAB_THEME", "high-contrast")
    app = ServelabApp(tui_folder.folder)
    async with settled(app, (80, 24)) as pilot:
        assert app.theme == HIGH_CONTRAST.name and app.has_class("-high-contrast")
        await press(pilot, "ctrl+t")
        assert app.theme != HIGH_CONTRAST.name and not app.has_class("-high-contrast")


async def test_palette_offers_the_experiments(tui_folder: TuiFolder) -> None:
    app = ServelabApp(tui_folder.folder)
    async with settled(app, (100, 30)) as pilot:
        await press(pilot, "ctrl+p")
        await press(pilot, *"ngram")
        await wait_for(pilot, lambda: "experiment: tiny-cpu-vllm-ngram" in screen_text(app))  # the palette's answer, drawn


def test_binding_ids_are_unique_per_class_and_cover_the_log_keys() -> None:
    ids = known_binding_ids()
    for wanted in ("log.search", "log.next-match", "log.follow", "log.first-error", "log.wrap", "log.filter", "app.help", "app.back"):
        assert wanted in ids


def test_missing_folder_is_one_clean_error(tmp_path: Path) -> None:
    with pytest.raises(ServelabError, match="experiments folder not found"):
        run_app(str(tmp_path / "nope"), readonly=False)


async def test_latest_run_column_and_enter_opens_it(tui_folder: TuiFolder) -> None:
    from tests.fixtures.tui import RECORDED_LOGS
    from servelab.tui.screens.run import RunScreen

    run_id = tui_folder.replay("tiny-cpu-vllm-ngram", RECORDED_LOGS / "vllm-cpu-kv-cache-too-small.log", exit_code=1)
    app = ServelabApp(tui_folder.folder)
    app.watch_runs = False
    async with settled(app, (120, 30)) as pilot:
        screen = app.screen
        assert isinstance(screen, ExperimentsScreen)
        await wait_for(pilot, lambda: "tiny-cpu-vllm-ngram" in screen.latest, timeout=10)
        assert screen.latest["tiny-cpu-vllm-ngram"].state == "crashed"  # exit code 1
        await wait_for(pilot, lambda: "crashed" in screen_text(app))  # drawn in a later frame than the state
        screen.select_row(str(tui_folder.folder / "tiny-cpu-vllm-ngram.toml"))
        await press(pilot, "enter")
        assert isinstance(app.screen, RunScreen) and app.screen.run_id == run_id


@pytest.mark.parametrize("name_len,host_len", [(24, 5), (60, 40), (100, 12)])
async def test_the_latest_state_stays_whole_at_80_columns_whatever_the_names(tui_folder: TuiFolder, name_len: int, host_len: int) -> None:
    """Long experiment and host names and the widest speculation label are cut in the list, never the run's state."""
    from tests.fixtures.tui import RECORDED_LOGS

    name = ("long-experiment-name-" * 5)[:name_len].rstrip("-")
    host = ("h" + "-lab-gpu-host" * 4)[:host_len].rstrip("-")
    source = (tui_folder.folder / "tiny-cpu-vllm-draft.toml").read_text()  # draft_model k=2: the widest label shipped
    (tui_folder.folder / f"{name}.toml").write_text(source.replace('engine = "vllm"', f'engine = "vllm"\nhost = "{host}"'))
    workdir = tui_folder.workdir.parent / f"work-{host}"
    with (tui_folder.folder / "hosts.toml").open("a") as f:
        f.write(f'\n[hosts.{host}]\npython = "{sys.executable}"\nworkdir = "{workdir}"\n')
    tui_folder.replay(name, RECORDED_LOGS / "vllm-cpu-kv-cache-too-small.log", exit_code=1, host=host)
    app = ServelabApp(tui_folder.folder)
    app.watch_runs = False
    async with settled(app, (80, 24)) as pilot:
        screen = app.screen
        assert isinstance(screen, ExperimentsScreen)
        await wait_for(pilot, lambda: name in screen.latest)
        # a long name is cut in the middle (its start stays), the state never
        await wait_for(pilot, lambda: any(name[:8] in line and "crashed" in line for line in screen_text(app).splitlines()))
        assert "draft k=2" in screen_text(app)
