"""LineIndex: the spool + line index behind the log view, fed with the real shared logs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engines.logs.lines import LineKind
from tests.fixtures.tui import SHARED_LOGS
from tui.widgets.line_index import LineIndex, display_text

NGRAM_LOG = SHARED_LOGS / "vllm-cpu-ngram-startup-and-serve.log"
SHARDS_LOG = SHARED_LOGS / "vllm-shards-carriage-return-prefix-39610.log"


def feed(index: LineIndex, data: bytes, chunk: int) -> None:
    for i in range(0, len(data), chunk):
        index.append(data[i : i + chunk])


def rows_text(index: LineIndex) -> list[str]:
    return [index.text(index.line_at_row(r)) for r in range(index.row_count)]


def test_display_text_keeps_latest_carriage_return_update() -> None:
    assert display_text(b"\rLoading 1/4\rLoading 2/4\r") == "Loading 2/4"
    assert display_text(b"\x1b[32mINFO\x1b[0m ready\r") == "INFO ready"


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_chunking_does_not_change_the_index(tmp_path: Path, chunk: int) -> None:
    data = NGRAM_LOG.read_bytes()
    whole = LineIndex(tmp_path / "whole.log")
    whole.append(data)
    parts = LineIndex(tmp_path / f"parts{chunk}.log")
    feed(parts, data, chunk)
    assert parts.line_count == whole.line_count == data.count(b"\n")
    assert rows_text(parts) == rows_text(whole)
    assert (tmp_path / f"parts{chunk}.log").read_bytes() == data


def test_shard_bar_updates_collapse_to_the_latest(tmp_path: Path) -> None:
    index = LineIndex(tmp_path / "s.log")
    feed(index, SHARDS_LOG.read_bytes(), 50)
    bars = [t for t in rows_text(index) if "Loading safetensors checkpoint shards" in t]
    assert bars == ["Loading safetensors checkpoint shards:  15% Completed | 19/125 [00:37<03:32,  2.00s/it]"]
    # The bare "(Worker_TP0 pid=505)" lines between updates went with them.
    assert sum(1 for t in rows_text(index) if t.strip() == "(Worker_TP0 pid=505)") <= 1


def test_unfinished_tail_shows_its_latest_update(tmp_path: Path) -> None:
    index = LineIndex(tmp_path / "t.log")
    index.append(b"first\nLoading:  10% Completed | 1/10\r")
    index.append(b"Loading:  20% Completed | 2/10\r")
    assert index.row_count == 2
    assert index.text(index.line_at_row(1)) == "Loading:  20% Completed | 2/10"
    index.append(b"\n")
    assert index.line_count == 2 and index.row_count == 2


def test_noise_folds_and_unfolds(tmp_path: Path) -> None:
    index = LineIndex(tmp_path / "n.log")
    index.append(NGRAM_LOG.read_bytes())
    folded = rows_text(index)
    assert not any("DeprecationWarning" in t for t in folded)
    index.set_fold_noise(False)
    shown = rows_text(index)
    assert any("DeprecationWarning" in t for t in shown)
    assert len(shown) > len(folded)


def test_search_finds_existing_and_new_lines_and_filter_hides_the_rest(tmp_path: Path) -> None:
    index = LineIndex(tmp_path / "f.log")
    index.append(NGRAM_LOG.read_bytes())
    expected = sum(1 for r in range(index.line_count) if re.search("spec_decode", index.text(r), re.I))
    assert index.set_search(re.compile("spec_decode", re.I)) == expected > 0
    index.set_filter(True)
    assert index.row_count == expected
    index.append(b"INFO something unrelated\nINFO spec_decode again\n")
    assert index.row_count == expected + 1
    last = index.line_count - 1
    assert index.next_match(last - 1) == last
    assert index.next_match(last) == index.matches[0]  # wraps around
    assert index.next_match(index.matches[0], forward=False) == last
    index.set_filter(False)
    assert index.row_count > expected + 1


def test_first_error_is_the_first_error_line(tmp_path: Path) -> None:
    index = LineIndex(tmp_path / "e.log")
    index.append(b"INFO a\nINFO b\nTraceback (most recent call last):\n  File \"x.py\", line 1\nValueError: boom\n")
    line = index.first_error()
    assert line == 2
    assert index.kind(line) is LineKind.TRACEBACK


def test_memory_per_line_is_index_only(tmp_path: Path) -> None:
    """Texts are read back from the spool: only a bounded cache of them is held."""
    index = LineIndex(tmp_path / "m.log")
    index.append(b"".join(b"INFO line %d with some text to make it long enough\n" % i for i in range(20000)))
    for r in range(index.row_count):
        index.text(index.line_at_row(r))
    assert len(index._cache) <= 4096
