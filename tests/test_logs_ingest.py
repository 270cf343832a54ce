"""The ingest worker's one scan per block: one Hyperscan database for the classifier and the analyzer,
and the same kinds and analysis as each of them scanning on its own, on every real log."""

from __future__ import annotations

import io
import os
import random
from pathlib import Path
from typing import Any

import pytest

from servelab.engines.logs import classify, ingest, prefilter
from servelab.engines.logs.classify import ANCHOR_SOURCES, CODE, SUPERSEDED, Classified, LineClassifier
from servelab.engines.logs.lines import LineKind
from servelab.engines.runs.state import RunState
from servelab.engines.logs.live import analyzer_for
from servelab.engines.logs.ingest import Worker, receive
from tests.conftest import SHARED_LOGS

DATA = Path(__file__).resolve().parent / "data" / "logs"
ALL_LOGS = sorted(DATA.glob("*.log")) + sorted(SHARED_LOGS.glob("*.log"))


def _engine(log: Path) -> str:
    return "sglang" if log.name.startswith("sglang") else "vllm"


def _run(spool: Path, data: bytes, engine: str, *, shared: bool, engine_first: bool, seed: int) -> list[tuple[Any, ...]]:
    """The worker on ``data`` growing in random pieces (cut inside lines too), stepped as ``serve`` does."""
    out = io.BytesIO()
    worker = Worker(out)
    spool.write_bytes(data)
    worker.handle(("open", str(spool)))

    def name_engine() -> None:
        worker.handle(("engine", engine))
        if not shared:
            worker.shared = False  # each reader scans on its own: the path without a shared database

    if engine_first:
        name_engine()
    rnd = random.Random(seed)
    cuts = sorted({rnd.randrange(1, len(data)) for _ in range(6)} | {len(data)})
    for i, cut in enumerate(cuts):
        worker.handle(("grow", data.rfind(b"\n", 0, cut) + 1, cut))
        steps = 0
        while worker.wait_s() == 0.0:
            worker.step()
            steps += 1
            assert steps < 100_000, "the worker makes no progress"
        if i == 0 and not engine_first:
            name_engine()  # the analyzer starts behind the classifier and catches up
    worker.handle(("exited", 1))
    worker.handle(("finish",))
    while worker.wait_s() is not None:
        worker.step()
    worker.step()
    os.close(worker.fd)
    stream = io.BytesIO(out.getvalue())
    messages = []
    while (m := receive(stream.read)) is not None:
        messages.append(m)
    return messages


def _kinds(messages: list[tuple[Any, ...]]) -> list[Classified]:
    return [m[1] for m in messages if m[0] == "kinds"]


def _last_analysis(messages: list[tuple[Any, ...]]) -> Any:
    last = [m for m in messages if m[0] == "analysis"][-1]
    return ingest.unpack_analysis(last[2], last[3])


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 24 kB (the longest line of the real logs is 19 kB; a block holds at least one whole
    line): a real log takes several, so partial lines and catching up occur."""
    monkeypatch.setattr(ingest, "BLOCK", 24 << 10)


def test_the_worker_compiles_one_database_and_scans_each_block_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_blocks: None) -> None:
    assert prefilter.HYPERSCAN, "hyperscan is a dependency: the shared database must be the one tested"
    built: list[tuple[str, ...]] = []
    real = prefilter.compiled_database

    def counting(patterns: tuple[str, ...]) -> Any:
        built.append(patterns)
        return real(patterns)

    monkeypatch.setattr(prefilter, "compiled_database", counting)
    monkeypatch.setattr(classify, "compiled_database", counting)
    monkeypatch.setattr(classify, "_DB", None)
    monkeypatch.setattr(classify, "HS_FROM_BYTES", 0)  # a classifier scanning alone would build its own at once
    own_scans: list[int] = []
    real_ends = classify.AnchorScanner.ends
    monkeypatch.setattr(classify.AnchorScanner, "ends", lambda self, block: own_scans.append(len(block)) or real_ends(self, block))
    shared_scans: list[int] = []
    real_shared = prefilter.Prefilter.shared_scan
    monkeypatch.setattr(prefilter.Prefilter, "shared_scan", lambda self, data: shared_scans.append(len(data)) or real_shared(self, data))
    log = SHARED_LOGS / "vllm-cpu-ngram-startup-and-serve.log"
    data = log.read_bytes()
    messages = _run(tmp_path / "spool.log", data, "vllm", shared=True, engine_first=True, seed=3)
    kinds = _kinds(messages)
    assert len(kinds) >= 5  # several blocks (and pieces cut inside lines)
    assert len(built) == 1 and built[0][-len(ANCHOR_SOURCES) :] == ANCHOR_SOURCES  # the analyzer's patterns, then the anchors
    assert own_scans == [] and len(shared_scans) == len(kinds)  # every block: one scan, for both
    assert sum(shared_scans) == data.rfind(b"\n") + 1


@pytest.mark.parametrize("engine_first", [True, False], ids=["engine-first", "engine-later"])
def test_one_scan_gives_the_kinds_and_analysis_of_separate_scans_on_every_real_log(tmp_path: Path, small_blocks: None, engine_first: bool) -> None:
    assert len(ALL_LOGS) > 40
    for n, log in enumerate(ALL_LOGS):
        data = log.read_bytes()
        engine = _engine(log)
        one = _run(tmp_path / "one.log", data, engine, shared=True, engine_first=engine_first, seed=n)
        two = _run(tmp_path / "two.log", data, engine, shared=False, engine_first=engine_first, seed=n)
        assert _kinds(one) == _kinds(two), log.name
        # the kinds are the classifier's own on the same blocks, but for an orderly stop's echo
        # (errors and warnings after the stop line), folded as shutdown noise
        alone = LineClassifier()
        own = [alone.classify(data[a : _span(data, a, k)]) for a, k in _offsets(data, _kinds(two))]
        got = _last_analysis(one)
        for mine, theirs in zip(own, _kinds(two), strict=True):
            assert (mine.first, mine.hidden_before, mine.width) == (theirs.first, theirs.hidden_before, theirs.width), log.name
            for i, (a, b) in enumerate(zip(mine.codes, theirs.codes, strict=True)):
                if a != b:
                    assert b & ~SUPERSEDED == SHUTDOWN, (log.name, mine.first + i)
                    assert got.root_cause is None and got.state is not RunState.CRASHED, log.name  # a stop, not a crash
        assert got == _last_analysis(two), log.name
        # and the analyzer's own, fed the whole log at once
        direct = analyzer_for(engine)
        direct.feed(data)
        direct.mark_exited(1)
        direct.finish()
        assert got == direct.snapshot(), log.name


SHUTDOWN = CODE[LineKind.NOISE_SHUTDOWN]


@pytest.mark.parametrize("shared", [True, False], ids=["one-scan", "own-scans"])
def test_a_stops_echo_is_folded_under_the_stop_and_a_crash_is_not(tmp_path: Path, small_blocks: None, shared: bool) -> None:
    """#22: SGLang's "scheduler_0 ... crashed with exit code -15" and "Sleeping 5 seconds before crash
    diagnostics" after "SIGTERM received" are the stop's echo: every line after the stop line is
    shutdown noise (folded under it); a crash after ready folds nothing."""
    data = (DATA / "sglang-cpu-good-serve.log").read_bytes()
    codes = b"".join(k.codes for k in _kinds(_run(tmp_path / "s.log", data, "sglang", shared=shared, engine_first=True, seed=1)))
    lines = data.split(b"\n")
    stop = next(i for i, line in enumerate(lines) if b"SIGTERM received" in line)
    echo = next(i for i, line in enumerate(lines) if b"crashed with exit code -15" in line)
    assert codes[stop] & ~SUPERSEDED != SHUTDOWN  # the stop line itself shows
    assert codes[echo] & ~SUPERSEDED == SHUTDOWN and LineKind.NOISE_SHUTDOWN.is_noise
    assert all(c & ~SUPERSEDED == SHUTDOWN for c in codes[stop + 1 :])
    assert SHUTDOWN not in {c & ~SUPERSEDED for c in codes[: stop + 1]}  # what came before the stop stays as it was
    crash = (DATA / "sglang-cpu-crash-after-ready.log").read_bytes()
    crash_codes = b"".join(k.codes for k in _kinds(_run(tmp_path / "c.log", crash, "sglang", shared=shared, engine_first=True, seed=1)))
    assert SHUTDOWN not in {c & ~SUPERSEDED for c in crash_codes}  # a crash folds nothing: its lines are the evidence


def _span(data: bytes, start: int, k: Classified) -> int:
    end = start
    for _ in range(len(k.codes)):
        end = data.index(b"\n", end) + 1
    return end


def _offsets(data: bytes, kinds: list[Classified]) -> list[tuple[int, Classified]]:
    out, at = [], 0
    for k in kinds:
        out.append((at, k))
        at = _span(data, at, k)
    return out


def test_a_line_longer_than_a_block_is_classified_and_analysed_not_stalled_on(tmp_path: Path, small_blocks: None) -> None:
    """A garbage line far longer than BLOCK (a pasted blob, a binary dump) inside a real log: the
    worker gets past it, and classifies and analyses the rest as it does without it."""
    for log in (SHARED_LOGS / "vllm-cpu-ngram-startup-and-serve.log", SHARED_LOGS / "sglang-eagle3-official-draft-8229.log"):
        raw = log.read_bytes()
        blob = b"x" * (3 * ingest.BLOCK + 17) + b"\n"  # first, so no traceback or stage is cut by it
        data = raw[: raw.index(b"\n") + 1] + blob + raw[raw.index(b"\n") + 1 :]
        plain = _run(tmp_path / "plain.spool", raw, _engine(log), shared=True, engine_first=True, seed=3)
        messages = _run(tmp_path / "blob.spool", data, _engine(log), shared=True, engine_first=True, seed=3)
        assert sum(len(k.codes) for k in _kinds(messages)) == sum(len(k.codes) for k in _kinds(plain)) + 1 == raw.count(b"\n") + 1, log.name
        a, b = _last_analysis(messages), _last_analysis(plain)
        cause = lambda x: (x.root_cause.exception, x.root_cause.message) if x.root_cause else None  # noqa: E731
        assert (a.state, a.was_ready, cause(a), a.spec_decode) == (b.state, b.was_ready, cause(b), b.spec_decode), log.name
