"""keymap.toml: overrides by binding id; every bad entry is one line, never an exception."""

from __future__ import annotations

from pathlib import Path

from servelab.tui.keymap import load_keymap

KNOWN = {"log.search", "app.help"}


def test_missing_file_means_defaults(tmp_path: Path) -> None:
    assert load_keymap(KNOWN, tmp_path / "none.toml") == ({}, [])


def test_overrides_and_problems(tmp_path: Path) -> None:
    path = tmp_path / "keymap.toml"
    path.write_text('[keys]\n"log.search" = "slash, ctrl+f"\n"app.help" = ""\n"nope" = "x"\n[extra]\n')
    overrides, problems = load_keymap(KNOWN, path)
    assert overrides == {"log.search": "slash,ctrl+f"}
    assert len(problems) == 3
    assert any("nope" in p for p in problems) and any("app.help" in p for p in problems) and any("[extra]" in p for p in problems)
    assert all("\n" not in p for p in problems)


def test_broken_toml_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "keymap.toml"
    path.write_text('[keys\n"log.search" = \n')
    overrides, problems = load_keymap(KNOWN, path)
    assert overrides == {} and len(problems) == 1 and str(path) in problems[0]
