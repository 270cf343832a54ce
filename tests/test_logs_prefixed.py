"""Metamorphic: a log captured through docker compose, a log viewer, journald, kubectl or a log
platform reads as the bare log does.

For every real log (../shared/logs, tests/data/logs, recursively) and every prefix style, the
prefixed copy gives the same state, was_ready, root cause (exception and message), stages and
spec-decode figures as the bare log; and any rechunking of a prefixed log gives what it gives read
whole. The styles are the capture tools' own forms, applied to every line.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servelab.engines.logs.analyzer import LogAnalyzer
from servelab.engines.logs.lines import LineSplitter
from servelab.engines.logs.prefix import line_start
from servelab.engines.logs.files import _grammar, analyze_bytes, guess_engine
from servelab.engines.logs.analysis import Analysis
from tests.conftest import REPO
from tests.fixtures.capture_prefixes import LOGS, PLATFORM, STYLES, prefixed
from tests.fixtures.heldout import PREFIXED, load_heldout

def facts(a: Analysis) -> dict[str, Any]:
    """What must not change with the capture tool."""
    rc = a.root_cause
    return {
        "engine": a.engine,
        "state": a.state,
        "was_ready": a.was_ready,
        "root_cause": (rc.exception, rc.message) if rc else None,
        "stages": [s.to_json() for s in a.stages],
        "spec": a.spec_decode.to_json() if a.spec_decode else None,
        "failed_stage": a.failed_stage,
    }


def _name(p: Path) -> str:
    return str(p.relative_to(p.parents[1]))


def test_there_are_real_logs() -> None:
    assert len(LOGS) >= 100, LOGS


#: Logs whose stage times a prefix takes away: a capture stamp on one line only ("[2025-02-27T16:30:43Z] "
#: on the first, the paste lost it on the others) reads as the bare log's time; behind a capture tool's
#: prefix it is learnt as that prefix's optional field, stripped with it (and the paste's leading space on the
#: other lines as part of the prefix, so the stamped line keeps a kubectl stamp). State, cause and stages hold.
KNOWN_STAMP_MISSES = {"multinode-h200-nccl-watchdog-timeout-work-32-3932.log"}


def _untimed(stages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in s.items() if k not in ("started_at", "ended_at")} for s in stages]


@pytest.mark.parametrize("style", [*STYLES, PLATFORM])
def test_prefixed_logs_read_as_the_bare_logs(style: str) -> None:
    failures = []
    for path in LOGS:
        bare = path.read_bytes()
        want = facts(analyze_bytes(bare))
        a = analyze_bytes(prefixed(bare, style))
        got = facts(a)
        if path.name in KNOWN_STAMP_MISSES:
            want["stages"], got["stages"] = _untimed(want["stages"]), _untimed(got["stages"])  # all else holds
        if got != want:
            diff = {k: (want[k], got[k]) for k in want if want[k] != got[k]}
            failures.append(f"{_name(path)}: {diff}")
        elif len(line_start().findall(bare)) >= 2 and path.name not in KNOWN_STAMP_MISSES:
            # a log with engine lines to learn from: what was stripped is recorded, every line of it
            # (a line that is the prefix alone, a blank line behind it, may be dropped whole instead)
            done = a.prefix.dropped if style == PLATFORM and a.prefix else a.prefix.stripped + a.prefix.dropped if a.prefix else 0
            n = bare.count(b"\n")
            if done < n:
                failures.append(f"{_name(path)}: {n} lines, prefix {a.prefix}")
    assert not failures, "\n".join(failures)


#: The held-out logs their expectations state were captured behind a prefix (issue #20's class 1).
CAPTURED_PREFIXED = {c.path for c in load_heldout() if PREFIXED in c.classes} | {
    batch.parent / c["file"]
    for batch in (REPO / "tests" / "data" / "logs").glob("fresh-*/expectations.json")
    for c in json.loads(batch.read_text())["cases"]
    # (relay_prefix: some lines only, behind the logger of a process that relays the engine's stderr;
    # quote_prefix: pasted inside a Markdown quote, "> " before every line)
    if (c.get("capture_prefix") or c.get("relay_prefix") or c.get("quote_prefix")) and c["file"] != "anyscale-table-prefix-actor-died-creation-task-54739.log"
    # a prefix is learnt from two lines at least: a one-line excerpt behind one cannot show it
    and len((batch.parent / c["file"]).read_text(errors="replace").splitlines()) > 2
}


#: Bare logs whose own text is still learnt as a prefix (strict: each must still be, until fixed).
KNOWN_PREFIX_MISSES: dict[str, str] = {}
#: Logs captured behind a prefix (as their expectations state) whose prefix is still not learnt (strict too).
KNOWN_UNLEARNT: dict[str, str] = {
    "sglang-pd-hicache-native-frames-bin-sh-prefix-13912.log":
        "a launcher's tag after a stamp in SGLang's own form ('[2025-11-25 16:01:47] [/bin/sh@<0,0>]: '): the stamp reads as the engine's line start",
}


def test_bare_logs_learn_no_prefix_from_engine_text() -> None:
    """A bare log's own headers are never taken for a capture prefix: only a container stamp is.
    The logs captured behind a prefix (as their expectations state) have theirs learnt."""
    assert len(CAPTURED_PREFIXED) >= 5
    for path in LOGS:
        p = analyze_bytes(path.read_bytes()).prefix
        if path.name in KNOWN_PREFIX_MISSES:
            assert p is not None and p.stripped > 0, f"{_name(path)} is read right now: take it out of KNOWN_PREFIX_MISSES"
            continue
        if path.name in KNOWN_UNLEARNT:
            assert p is None or not p.stripped, f"{_name(path)} is read right now: take it out of KNOWN_UNLEARNT"
            continue
        if path in CAPTURED_PREFIXED and b"^[[" not in path.read_bytes():
            assert p is not None and p.shapes and p.stripped > 0, (_name(path), p)
        elif path in CAPTURED_PREFIXED:
            # colour codes in a terminal's caret notation ("^[[36m(WorkerDict pid=7)^[[0m") are escapes,
            # stripped as such: what stands before the engine's text is then its own process tag
            assert p is None or p.stripped > 0, (_name(path), p)
        elif p is not None:
            assert p.dropped == 0 and all(e[:2] == "20" and e[10] == "T" for e in p.examples), (_name(path), p)


def test_the_prefix_is_in_the_json() -> None:
    bare = next(p for p in LOGS if p.name == "vllm-cpu-good-ngram-serve.log").read_bytes()
    js = analyze_bytes(prefixed(bare, "compose-2-streams")).to_json()
    assert js["prefix"]["stripped"] == bare.count(b"\n")
    assert {"sglang-router-1  | ", "vllm-1           | "} <= set(js["prefix"]["examples"])
    assert analyze_bytes(bare).to_json()["prefix"] is None


def _feed(data: bytes, cuts: list[int]) -> Analysis:
    an = LogAnalyzer(_grammar(guess_engine(data[:65536])))
    prev = 0
    for c in sorted(cuts):
        an.feed(data[prev:c])
        prev = c
    an.feed(data[prev:])
    an.finish()
    return an.snapshot()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    path=st.sampled_from(LOGS),
    style=st.sampled_from([*STYLES, PLATFORM]),
    cuts=st.lists(st.floats(0, 1), max_size=12),
)
def test_any_chunking_of_a_prefixed_log_reads_as_it_whole(path: Path, style: str, cuts: list[float]) -> None:
    data = prefixed(path.read_bytes(), style)
    whole = analyze_bytes(data)
    got = _feed(data, [int(c * len(data)) for c in cuts])
    assert facts(got) == facts(whole)
    assert got.prefix == whole.prefix


@pytest.mark.parametrize("style", [*STYLES, PLATFORM])
def test_a_viewers_split_lines_read_as_the_bytes(style: str) -> None:
    """The line-by-line path (a viewer's LineSplitter, prefixes stripped line by line) agrees with
    the chunk path (bytes.replace / one regex pass a chunk), prefix record included."""
    failures = []
    for path in LOGS:
        data = prefixed(path.read_bytes(), style)
        grammar = _grammar(guess_engine(data[:65536]))
        sp = LineSplitter()
        an = LogAnalyzer(grammar)
        for i in range(0, len(data), 3000):
            an.feed_lines(sp.feed(data[i : i + 3000]))
        an.feed_lines(sp.flush())
        an.finish()
        by_lines = dataclasses.asdict(an.snapshot())
        by_bytes = dataclasses.asdict(_feed(data, [len(data) // 3, len(data) // 2]))
        if by_lines != by_bytes:
            failures.append(f"{_name(path)}: {[k for k in by_bytes if by_bytes[k] != by_lines[k]]}")
    assert not failures, "\n".join(failures)


def test_analyze_says_what_it_stripped() -> None:
    from servelab.tui.commands.analyze import render

    bare = next(p for p in LOGS if p.name == "vllm-cpu-good-ngram-serve.log").read_bytes()
    n = bare.count(b"\n")
    assert f"line prefix stripped from {n} lines ('vllm-1  | ')" in render(analyze_bytes(prefixed(bare, "compose")))
    assert "platform lines" in render(analyze_bytes(prefixed(bare, PLATFORM)))
    assert "prefix" not in render(analyze_bytes(bare)) and "platform" not in render(analyze_bytes(bare))
