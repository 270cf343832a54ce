"""What this machine remembers of a host: an outage reads as its last check, and only an answer clears it."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from servelab.engines.hosts import seen
from servelab.engines.hosts.seen import SeenStore


def test_an_outage_reads_as_its_last_check_not_its_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An outage an earlier session saw keeps its start, but the note gives the time of the latest failed check."""
    t = dt.datetime(2026, 12, 1, 9, 31, 5, tzinfo=dt.timezone.utc)
    monkeypatch.setattr(seen, "now", lambda: t)
    store = SeenStore(tmp_path / "seen.json")
    store.unreachable("box", "refused")
    first = store.host("box").note
    later = t + dt.timedelta(hours=3, minutes=7)
    monkeypatch.setattr(seen, "now", lambda: later)
    again = SeenStore(tmp_path / "seen.json")  # a new dashboard session reads the file
    h = again.unreachable("box", "timed out")
    assert h.down_since == t and h.checked_at == later and h.reason == "timed out"
    assert first == f"unreachable, checked {seen.clock(t)[:-3]}"
    assert h.note == f"unreachable, checked {seen.clock(later)[:-3]}" and h.note != first
    assert SeenStore(tmp_path / "seen.json").host("box").checked_at == later  # kept across sessions
    again.answered("box")
    assert again.host("box").note == "" and again.host("box").checked_at is None  # only an answer clears it
    assert SeenStore(tmp_path / "seen.json").host("box").note == ""


def test_a_check_a_minute_writes_the_file_at_most_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The dashboard checks a down host every few seconds: the file is written once a minute, not each time."""
    t = dt.datetime(2026, 12, 1, 9, 31, 0, tzinfo=dt.timezone.utc)
    store = SeenStore(tmp_path / "seen.json")
    writes: list[int] = []
    real_save = store.save
    monkeypatch.setattr(store, "save", lambda: (writes.append(1), real_save()))
    for second in range(0, 120, 5):
        monkeypatch.setattr(seen, "now", lambda s=second: t + dt.timedelta(seconds=s))
        store.unreachable("box", "refused")
    assert len(writes) == 2
