"""engines/atomic_write.py: the one temp-and-rename write of the core (run files, caches, state)."""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.engines.atomic_write import write_atomic


@pytest.mark.parametrize("durable", [True, False])
def test_a_write_replaces_the_file_whole_and_leaves_no_temporary(tmp_path: Path, durable: bool) -> None:
    path = tmp_path / "deep" / "state.json"
    write_atomic(path, b"old", durable=durable)
    write_atomic(path, b"new" * 1000, durable=durable)
    assert path.read_bytes() == b"new" * 1000
    assert sorted(p.name for p in path.parent.iterdir()) == ["state.json"]


def test_a_write_that_cannot_land_raises_keeps_what_was_there_and_leaves_no_temporary(tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    (taken / "inside").mkdir(parents=True)  # a folder where the file should go: the rename fails
    with pytest.raises(OSError):
        write_atomic(taken, b"data")
    assert (taken / "inside").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]
