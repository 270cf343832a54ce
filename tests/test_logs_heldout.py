"""Held-out real logs (tests/data/logs, stated in expectations-2026-12*.json) with what the analyzer must find.

These are logs the analyzer was not written against: the 15 of ../shared/logs/2026-12 and the ones
collected for issue #20 from public vLLM and SGLang issues and PRs. Most are read as an operator captures
them: behind a prefix added by docker compose, journald, a CI runner or a log viewer; cut anywhere
(``tail``-style windows, excerpts starting inside a traceback); crashing after the server served; and
dying with a fatal line that is not a Python exception (CUDA device-side assertion, NCCL watchdog,
C++ ``terminate``). What a careful reader finds in each is in the JSON, with the reasoning (``why``).
"""

from __future__ import annotations

import pytest

from servelab.engines.logs.files import analyze_bytes, analyze_file
from servelab.engines.logs.analysis import Analysis
from tests.fixtures.heldout import (
    CUT_WINDOW,
    DATA,
    EXPECTATION_FILES,
    NO_TRACEBACK,
    PREFIXED,
    SERVING_EVIDENCE,
    HeldOut,
    exception_name,
    load_heldout,
)

CASES = load_heldout()


def _id(case: HeldOut) -> str:
    return case.file.removesuffix(".log")


def test_expectations_state_every_log_once_and_cover_issue_20s_classes() -> None:
    names = [c.file for c in CASES]
    assert len(names) == len(set(names)), "a log is stated twice"
    for case in CASES:
        assert case.path.is_file(), case.file
        assert case.path.read_text(errors="replace").startswith("# source: "), case.file
        assert case.state in {"starting", "loading", "ready", "crashed", "exited"}, case.file
    shared = [c for c in CASES if c.expectations == EXPECTATION_FILES[0]]
    collected = [c for c in CASES if c.expectations == EXPECTATION_FILES[1]]
    assert len(shared) == 15
    assert len(collected) >= 20
    for case in collected:
        first = case.path.read_text().splitlines()[0]
        assert case.source is not None and first.endswith(f"({case.source})"), case.file
        assert case.classes and case.classes <= {PREFIXED, SERVING_EVIDENCE, NO_TRACEBACK, CUT_WINDOW}, case.file
    assert sum(PREFIXED in c.classes for c in collected) >= 5
    assert sum(NO_TRACEBACK in c.classes for c in collected) >= 5
    assert any(SERVING_EVIDENCE in c.classes and c.state == "crashed" and c.was_ready for c in collected)
    assert any(CUT_WINDOW in c.classes for c in collected)


def _check(a: Analysis, case: HeldOut) -> None:
    assert (a.engine, a.state) == (case.engine, case.state)
    if case.was_ready is not None:
        assert a.was_ready is case.was_ready, "was_ready"
    rc = a.root_cause
    if case.state != "crashed" and case.exceptions == ("",) and not case.message:
        assert rc is None, f"root cause on a {case.state} log: {rc}"
    else:
        assert rc is not None, "no root cause"
        assert exception_name(rc.exception) in case.exceptions, f"exception {rc.exception!r}, message {rc.message[:120]!r}"
        assert case.message in rc.message, f"message {rc.message[:200]!r}"
    if case.spec_stated:
        if case.spec is None:
            assert a.spec_decode is None, "spec figures on a log that prints none"
        else:
            assert a.spec_decode is not None, "no spec figures"
            for figure, (low, high) in case.spec.items():
                value = getattr(a.spec_decode, figure)
                assert value is not None and low <= value <= high, f"{figure} = {value}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_heldout_log(case: HeldOut) -> None:
    a = analyze_file(case.path, case.engine)
    _check(a, case)
    if a.root_cause is not None:
        # the cause is an engine line, never one of the file's own "#" source / note / gap lines
        line = case.path.read_text(errors="replace").splitlines()[a.root_cause.line - 1]
        assert not line.startswith("#"), line


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_heldout_log_without_its_header_reads_the_same(case: HeldOut) -> None:
    """The ``# source:`` / ``# note:`` lines at the top are the corpus's, not the engine's: the log
    without them (as the operator had it) reads the same. Notes quote the fatal lines they describe, so
    a rule that looked at comment lines would name a note as the cause."""
    data = case.path.read_bytes()
    lines = data.splitlines(keepends=True)
    head = 0
    while head < len(lines) and lines[head].startswith(b"#"):
        head += 1
    assert head < len(lines), "no engine line"
    _check(analyze_bytes(b"".join(lines[head:]), case.engine), case)


def test_heldout_logs_are_the_corpus_data_folder_less_the_other_tests() -> None:
    """Every log in tests/data/logs has a test: the held-out ones here, the others in
    test_logs_collected.py and test_logs_recorded*.py (which leave the held-out ones to this module)."""
    from tests import test_logs_collected, test_logs_recorded, test_logs_recorded_sglang

    others = (
        set(test_logs_collected.CASES)
        | set(test_logs_recorded.CASES)
        | {"vllm-cpu-good-ngram-serve.log", "vllm-cpu-sigterm-while-loading.log"}
        | set(test_logs_recorded_sglang.CASES)
        | test_logs_recorded_sglang.NOT_CRASHES
    )
    heldout = {c.file for c in CASES}
    assert not others & heldout
    assert {p.name for p in DATA.glob("*.log")} == others | heldout
