"""LineIndex: the spool + line index behind the log view, fed with the real shared logs."""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left
from pathlib import Path

import pytest

from servelab.engines.logs.lines import LineKind, classify
from tests.fixtures.tui import RECORDED_LOGS, SHARED_LOGS
from servelab.engines.logs import classify as line_classify
from servelab.engines.logs.classify import KINDS, AnchorScanner, LineClassifier, anchor_ends_find, display_text
from servelab.tui.widgets import line_index
from servelab.tui.widgets.line_index import LineIndex

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


def all_logs() -> list[Path]:
    logs = sorted(SHARED_LOGS.glob("*.log")) + sorted(RECORDED_LOGS.glob("*.log"))
    assert len(logs) >= 10, "the shared and recorded logs are missing"
    return logs


def test_block_classifier_gives_what_classify_gives_line_by_line_on_every_recorded_log(tmp_path: Path) -> None:
    """The chunk-wide anchor search may only skip lines that classify() would call INFO."""
    for log in all_logs():
        data = log.read_bytes()
        index = LineIndex(tmp_path / f"{log.stem}.spool")
        feed(index, data, 65536)
        raws = data.split(b"\n")[: index.line_count]
        expected = [classify(display_text(raw)) for raw in raws]
        got = [KINDS[code & 0x7F] for code in index._kinds]
        assert got == expected, log.name
        index.close()


def anchored_lines(block: bytes, ends: list[int]) -> set[int]:
    newlines = [m.start() for m in re.finditer(b"\n", block)]
    return {bisect_left(newlines, end - 1) for end in ends}


def test_one_pass_anchor_scan_finds_the_lines_each_anchor_search_finds_on_every_recorded_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hyperscan's one pass and the per-anchor ``bytes.find`` (small blocks, no Hyperscan) flag the same lines."""
    assert line_classify._hs is not None, "hyperscan is a dependency: the one-pass scan must be the one tested"
    monkeypatch.setattr(line_classify, "HS_FROM_BYTES", 0)  # the recorded logs are small: scan them with it anyway
    scanner = AnchorScanner()
    flagged = 0
    for log in all_logs():
        data = log.read_bytes()
        data = data[: data.rfind(b"\n") + 1]
        got = anchored_lines(data, scanner.ends(data))
        assert got == anchored_lines(data, anchor_ends_find(data)), log.name
        flagged += len(got)
    assert flagged > 100 and scanner._scratch is not None  # Hyperscan did scan


def test_deferred_index_shows_every_line_at_once_unfolded_then_as_inline_once_classified(tmp_path: Path) -> None:
    data = NGRAM_LOG.read_bytes()
    inline = LineIndex(tmp_path / "inline.log")
    inline.append(data)
    lazy = LineIndex(tmp_path / "lazy.log", deferred=True)
    lazy.append(data)
    # Lazy first screen: every line is indexed and shown (unfolded) before any kind is known.
    assert lazy.line_count == inline.line_count == data.count(b"\n")
    assert lazy.unclassified == lazy.line_count and lazy.row_count == lazy.line_count
    assert lazy.text(lazy.line_at_row(lazy.row_count - 1)) == display_text(data.rstrip(b"\n").rsplit(b"\n", 1)[-1])
    assert lazy.row_of_line(lazy.line_count - 1) == lazy.row_count - 1
    assert lazy.first_error() is None
    # Completion: the worker's kinds, in blocks, make it the inline index exactly.
    classifier = LineClassifier()
    start = 0
    for cut in (len(data) // 3, 2 * len(data) // 3, len(data)):
        end = data.rfind(b"\n", 0, cut) + 1
        lazy.apply(classifier.classify(data[start:end]))
        start = end
    assert lazy.unclassified == 0 and lazy.classified_bytes == len(data)
    assert rows_text(lazy) == rows_text(inline) and lazy.row_count < lazy.line_count  # noise folded now
    assert lazy.first_error() == inline.first_error()


def test_deferred_kinds_may_lag_while_lines_keep_coming(tmp_path: Path) -> None:
    """Appends and classification interleave (the worker is behind); bar collapse spans blocks."""
    data = SHARDS_LOG.read_bytes()
    inline = LineIndex(tmp_path / "inline.log")
    feed(inline, data, 300)
    lazy = LineIndex(tmp_path / "lazy.log", deferred=True)
    classifier = LineClassifier()
    for i in range(0, len(data), 300):
        lazy.append(data[i : i + 300])
        if (i // 300) % 3 == 2:  # classify what is complete so far, every third chunk
            lazy.apply(classifier.classify(lazy.read(lazy.classified_bytes, lazy.tail_start)))
    lazy.apply(classifier.classify(lazy.read(lazy.classified_bytes, lazy.tail_start)))
    assert rows_text(lazy) == rows_text(inline)


def test_deferred_filter_shows_only_matches_before_and_after_classification(tmp_path: Path) -> None:
    lazy = LineIndex(tmp_path / "lazy.log", deferred=True)
    lazy.set_search(re.compile("ready", re.I))
    lazy.set_filter(True)
    lazy.append(b"INFO warming up\nINFO server ready\nINFO idle\nINFO ready again\n")
    assert lazy.row_count == 2 and [lazy.text(lazy.line_at_row(r)) for r in range(2)] == ["INFO server ready", "INFO ready again"]
    lazy.apply(LineClassifier().classify(lazy.read(0, lazy.tail_start)))
    assert lazy.row_count == 2 and lazy.row_of_line(3) == 1


def test_kinds_out_of_step_are_refused(tmp_path: Path) -> None:
    lazy = LineIndex(tmp_path / "lazy.log", deferred=True)
    lazy.append(b"INFO a\nINFO b\n")
    classifier = LineClassifier()
    classifier.next_line = 1  # as if line 0 had been classified elsewhere
    with pytest.raises(ValueError, match="do not follow"):
        lazy.apply(classifier.classify(b"INFO b\n"))


def test_index_costs_5_bytes_a_line_in_typed_arrays(tmp_path: Path) -> None:
    """Memory bound, structurally: per line a 4-byte start and a kind byte; rows cost only hidden lines."""
    index = LineIndex(tmp_path / "m.log")
    lines = 50_000
    index.append(b"".join(b"INFO line %d with some text to make it long enough\n" % i for i in range(lines)))
    arrays = (index._starts, index._kinds, index._rows, index._hidden, index._matches, index._errors)
    assert all(isinstance(a, array) for a in arrays)
    assert (index._starts.itemsize, index._kinds.itemsize) == (4, 1)
    per_line = sum(len(a) * a.itemsize for a in arrays) / lines
    assert per_line <= 5  # 0.5 MB per 100k lines, well below the 2 MB budget
    assert index.row_count == lines and index.text(index.line_at_row(lines - 1)).startswith(f"INFO line {lines - 1} ")


def visible_lines(index: LineIndex) -> list[int]:
    """The lines a view shows, by the rules stated once: classified, not folded, matching a filter."""
    shown = []
    for line in range(index.line_count):
        code = index._kinds[line]
        if code & 0x80 or (index.fold_noise and KINDS[code].is_noise):
            continue
        if index.filter and index.search is not None and not index.search.search(index.text(line)):
            continue
        shown.append(line)
    return shown


@pytest.mark.parametrize("mode", ["folded", "unfolded", "filtered"])
def test_rows_map_to_exactly_the_visible_lines_both_ways(tmp_path: Path, mode: str) -> None:
    """Rows kept as hidden lines (or as matches under a filter) give each visible line its row, in order."""
    data = NGRAM_LOG.read_bytes() + SHARDS_LOG.read_bytes()
    index = LineIndex(tmp_path / "r.log", fold_noise=mode != "unfolded")
    if mode == "filtered":
        index.set_search(re.compile("INFO|Loading", re.I))
        index.set_filter(True)
    feed(index, data, 4096)
    expected = visible_lines(index)
    assert 0 < len(expected) < index.line_count
    assert [index.line_at_row(r) for r in range(len(expected))] == expected
    assert [index.row_of_line(line) for line in expected] == list(range(len(expected)))
    assert index.row_count == len(expected)


def test_line_starts_past_the_4_gib_mark_stay_exact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Starts are stored as their low bits; the lines where the high part steps up are kept apart.

    The step is shrunk to 1 KiB so a small log crosses it many times, in and between chunks.
    """
    data = NGRAM_LOG.read_bytes()
    wide = LineIndex(tmp_path / "wide.log")
    feed(wide, data, 700)
    monkeypatch.setattr(line_index, "_OFFSET_BITS", 10)
    narrow = LineIndex(tmp_path / "narrow.log")
    feed(narrow, data, 700)
    assert len(narrow._wraps) >= len(data) >> 10 and not wide._wraps
    assert max(narrow._starts) < 1 << 10
    assert rows_text(narrow) == rows_text(wide)
    assert [narrow._start(i) for i in range(narrow.line_count)] == [wide._start(i) for i in range(wide.line_count)]
