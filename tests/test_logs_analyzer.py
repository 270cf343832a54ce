"""LogAnalyzer behaviour: chunking never changes the answer, live state changes, exit handling, bounded memory."""

from __future__ import annotations

import dataclasses
import os
import random
from pathlib import Path

import pytest

from servelab.engines.adapters.base import get_adapter
from servelab.engines.logs import rootcause, tbstate
from servelab.engines.logs.analyzer import LogAnalyzer
from servelab.engines.logs.files import analyze_bytes, guess_engine
from servelab.engines.logs.hints import HINTS, find_hint
from servelab.engines.logs.lines import LineSplitter
from servelab.engines.logs.series import SERIES_POINTS
from servelab.engines.logs.analysis import Analysis
from tests.conftest import SHARED_LOGS

DATA = Path(__file__).resolve().parent / "data" / "logs"
ALL_LOGS = sorted(DATA.glob("*.log")) + sorted(SHARED_LOGS.glob("*.log"))
GOOD = SHARED_LOGS / "vllm-cpu-ngram-startup-and-serve.log"


def _engine(path: Path) -> str:
    return path.name.split("-")[0]


def _run(data: bytes, engine: str, cuts: list[int]) -> dict[str, object]:
    an = LogAnalyzer(get_adapter(engine).grammar)
    prev = 0
    for c in sorted(cuts) + [len(data)]:
        an.feed(data[prev:c])
        prev = c
    an.finish()
    return dataclasses.asdict(an.snapshot())


@pytest.mark.parametrize("path", ALL_LOGS, ids=lambda p: p.name)
def test_chunking_never_changes_the_analysis(path: Path) -> None:
    data = path.read_bytes()
    eng = _engine(path)
    whole = _run(data, eng, [])
    rnd = random.Random(path.name)
    for _ in range(3):
        cuts = [rnd.randint(0, len(data)) for _ in range(rnd.randint(1, 60))]
        assert _run(data, eng, cuts) == whole
    if len(data) <= 30_000:
        assert _run(data, eng, list(range(1, len(data)))) == whole


@pytest.mark.parametrize("path", ALL_LOGS, ids=lambda p: p.name)
def test_feeding_split_lines_equals_feeding_bytes(path: Path) -> None:
    """A viewer that owns a LineSplitter and passes its Lines gets the same analysis."""
    data = path.read_bytes()
    eng = _engine(path)
    sp = LineSplitter()
    an = LogAnalyzer(get_adapter(eng).grammar)
    rnd = random.Random(len(data))
    i = 0
    while i < len(data):
        j = i + rnd.randint(1, 4096)
        an.feed_lines(sp.feed(data[i:j]))
        i = j
    an.feed_lines(sp.flush())
    an.finish()
    assert dataclasses.asdict(an.snapshot()) == _run(data, eng, [])


def test_crlf_and_ansi_do_not_change_the_analysis() -> None:
    data = GOOD.read_bytes()
    coloured = data.replace(b"(APIServer pid=", b"\x1b[1;36m(APIServer pid=").replace(b") INFO", b")\x1b[0;0m INFO")
    crlf = data.replace(b"\n", b"\r\n")
    base = dataclasses.asdict(analyze_bytes(data, "vllm"))
    assert dataclasses.asdict(analyze_bytes(coloured, "vllm")) == base
    assert dataclasses.asdict(analyze_bytes(crlf, "vllm")) == base


def _cut_at(data: bytes, marker: bytes) -> int:
    i = data.index(marker)
    return data.index(b"\n", i) + 1


def test_live_states_follow_the_log() -> None:
    data = GOOD.read_bytes()
    an = LogAnalyzer(get_adapter("vllm").grammar)
    an.feed(data[: _cut_at(data, b"non-default args")])
    assert an.snapshot().state == "starting"
    an.feed(data[_cut_at(data, b"non-default args") : _cut_at(data, b"Loading safetensors checkpoint shards:   0%")])
    s = an.snapshot()
    assert s.state == "loading" and s.stage("weights").status == "running"
    assert s.stage("weights").progress is not None and s.stage("weights").progress.done == 0
    upto_ready = _cut_at(data, b"Application startup complete")
    an.feed(data[_cut_at(data, b"Loading safetensors checkpoint shards:   0%") : upto_ready])
    s = an.snapshot()
    assert s.state == "ready" and s.was_ready and s.root_cause is None
    an.feed(data[upto_ready:])
    an.finish()
    assert an.snapshot().state == "exited"


def test_a_fatal_error_after_ready_means_crashed() -> None:
    data = GOOD.read_bytes()
    head = data[: _cut_at(data, b"Application startup complete")]
    worker = (SHARED_LOGS / "vllm-workerproc-failed-tp-ep-prefix-56007.log").read_bytes().split(b"\n", 2)[2]
    an = LogAnalyzer(get_adapter("vllm").grammar)
    an.feed(head)
    assert an.snapshot().state == "ready"
    an.feed(b"(EngineCore pid=9095) ERROR 11-29 10:30:00 [core.py:1112] EngineCore encountered a fatal error.\n" + worker)
    s = an.snapshot()
    assert s.state == "crashed" and s.was_ready
    assert s.root_cause is not None and s.root_cause.process == "Worker_TP0_EP0"


@pytest.mark.parametrize(
    ("upto", "code", "state"),
    [
        (b"Application startup complete", 0, "exited"),
        (b"Application startup complete", 1, "exited"),  # it was serving: a non-zero exit after ready is a stop
        (b"Loading drafter model", 1, "crashed"),  # died while loading, nothing printed: crashed
        (b"Loading drafter model", None, "crashed"),  # killed while loading
        (b"Loading drafter model", 0, "exited"),
    ],
)
def test_mark_exited(upto: bytes, code: int | None, state: str) -> None:
    data = GOOD.read_bytes()
    an = LogAnalyzer(get_adapter("vllm").grammar)
    an.feed(data[: _cut_at(data, upto)])
    an.mark_exited(code)
    s = an.snapshot()
    assert s.state == state and s.exit_code == code


def test_traceback_crash_stays_crashed_after_exit_zero() -> None:
    data = (DATA / "vllm-cpu-missing-model.log").read_bytes()
    an = LogAnalyzer(get_adapter("vllm").grammar)
    an.feed(data)
    an.mark_exited(0)
    assert an.snapshot().state == "crashed"


def test_memory_is_bounded_on_a_long_noisy_log() -> None:
    """Many tracebacks, bars and figures: every retained structure stays capped."""
    unit = b"".join(p.read_bytes() for p in SHARED_LOGS.glob("*.log"))
    an = LogAnalyzer(get_adapter("vllm").grammar)
    figures = (SHARED_LOGS / "vllm-throughput-mtp-43295.log").read_bytes()
    for _ in range(40):
        an.feed(unit)
    for _ in range(1000):
        an.feed(figures)
    s = an.snapshot()
    assert len(an._tail) < 10_000
    assert len(an._tb._cands) <= rootcause.MAX_CANDIDATES
    assert len(s.spec_series) <= SERIES_POINTS and len(s.throughput_series) == SERIES_POINTS
    assert all(len(b.frames) <= tbstate.MAX_FRAMES for b in an._tb._open.values())
    assert s.lines > 40_000


@pytest.mark.parametrize("path", ALL_LOGS, ids=lambda p: p.name)
def test_guess_engine(path: Path) -> None:
    assert guess_engine(path.read_bytes()[:65536]) == _engine(path)


def test_json_shape() -> None:
    a: Analysis = analyze_bytes(GOOD.read_bytes())
    js = a.to_json()
    assert {"engine", "state", "was_ready", "stages", "root_cause", "hint", "spec_decode"} <= set(js)
    assert set(js["stages"][0]) >= {"name", "status", "started_at", "ended_at", "progress"}
    assert js["stages"][2]["progress"] == {"done": 1, "total": 1, "rate": pytest.approx(254.48), "eta_s": 0.0}
    assert set(js["spec_decode"]) == {"acceptance_rate", "mean_acceptance_length", "per_position"}
    assert 0.0 <= js["spec_decode"]["acceptance_rate"] <= 1.0


def test_hint_table_entries_are_one_line_and_reachable() -> None:
    for needles, hint in HINTS:
        assert "\n" not in hint and needles
        # each entry is found by its own needles unless an earlier entry claims them first
        found = find_hint([" ".join(needles)])
        assert found is not None
    assert find_hint(["nothing known here"]) is None
    assert find_hint(["SyntaxError: x"], [("SyntaxError", "engine first")]) == "engine first"


def test_wrapper_with_inner_text_is_harvested_when_nothing_else_explains() -> None:
    """SGLang's "Capture cuda graph failed: <inner>" with the inner traceback missing (frames from issue 7918)."""
    log = (
        b"[2025-07-10 08:01:02 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=39.48 GB\n"
        b"[2025-07-10 08:01:09 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        b'  File "/opt/conda/lib/python3.10/site-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 336, in __init__\n'
        b"    self.capture()\n"
        b"Exception: Capture cuda graph failed: CUDA error: operation not permitted when stream is capturing\n"
        b"\n"
        b"[2025-07-10 08:01:09] Received sigquit from a child process. It usually means the child failed.\n"
    )
    a = analyze_bytes(log, "sglang")
    assert a.state == "crashed" and a.stage("cuda_graphs").status == "failed"
    rc = a.root_cause
    assert rc is not None and rc.process == "TP0" and rc.line == 5
    assert rc.message == "CUDA error: operation not permitted when stream is capturing" and rc.harvested
    assert a.hint is not None and "CUDA-graph safe" in a.hint


def test_vllm_runtime_wrapper_yields_to_the_worker_traceback() -> None:
    """After ready: EngineCore's "Worker failed with error '...'" wrapper and the worker's own traceback."""
    log = (
        b"(APIServer pid=2) INFO:     Application startup complete.\n"
        b"(Worker_TP1 pid=531) ERROR 04-12 18:43:20 [multiproc_executor.py:700] Traceback (most recent call last):\n"
        b'(Worker_TP1 pid=531) ERROR 04-12 18:43:20 [multiproc_executor.py:700]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/spec_decode/eagle.py", line 289, in propose\n'
        b"(Worker_TP1 pid=531) ERROR 04-12 18:43:20 [multiproc_executor.py:700]     hidden = self.model(x)\n"
        b"(Worker_TP1 pid=531) ERROR 04-12 18:43:20 [multiproc_executor.py:700] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB.\n"
        b"(EngineCore pid=157) ERROR 04-12 18:43:21 [core.py:1112] EngineCore encountered a fatal error.\n"
        b"(EngineCore pid=157) ERROR 04-12 18:43:21 [core.py:1112] Traceback (most recent call last):\n"
        b'(EngineCore pid=157) ERROR 04-12 18:43:21 [core.py:1112]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/multiproc_executor.py", line 444, in get_response\n'
        b"(EngineCore pid=157) ERROR 04-12 18:43:21 [core.py:1112] RuntimeError: Worker failed with error 'CUDA out of memory. Tried to allocate 2.00 MiB.', please check the stack trace above for the root cause\n"
    )
    a = analyze_bytes(log, "vllm")
    assert a.state == "crashed" and a.was_ready
    rc = a.root_cause
    assert rc is not None and (rc.exception, rc.process, rc.line) == ("torch.OutOfMemoryError", "Worker_TP1", 5)
    assert rc.where == "spec_decode/eagle.py:289 in propose"
    assert a.hint is not None and "--gpu-memory-utilization" in a.hint
    # without the worker's traceback, the wrapper's quoted text is the best there is
    only_wrapper = b"\n".join(ln for ln in log.split(b"\n") if not ln.startswith(b"(Worker_TP1"))
    b = analyze_bytes(only_wrapper, "vllm")
    assert b.root_cause is not None and b.root_cause.harvested
    assert b.root_cause.message == "CUDA out of memory. Tried to allocate 2.00 MiB." and b.root_cause.process == "EngineCore"


def _bytes_path(data: bytes, eng: str) -> dict[str, object]:
    return _run(data, eng, [len(data) // 3, len(data) // 2])


def _lines_path(data: bytes, eng: str) -> dict[str, object]:
    sp = LineSplitter()
    an = LogAnalyzer(get_adapter(eng).grammar)
    an.feed_lines(sp.feed(data))
    an.feed_lines(sp.flush())
    an.finish()
    return dataclasses.asdict(an.snapshot())


@pytest.mark.parametrize("seed", range(int(os.environ.get("LOGS_FUZZ_SEEDS", "25"))))  # more: LOGS_FUZZ_SEEDS=300
def test_shuffled_real_lines_read_the_same_in_bulk_and_line_by_line(seed: int) -> None:
    """Logs made of real lines from every log, in random runs and interleavings: the bulk path
    (prefilter, frame runs, stale tracebacks) must agree with reading every line one by one."""
    rnd = random.Random(seed)
    pools = [p.read_bytes().split(b"\n") for p in ALL_LOGS]
    out: list[bytes] = []
    while len(out) < 400:
        pool = rnd.choice(pools)
        start = rnd.randrange(len(pool))
        out.extend(pool[start : start + rnd.randint(1, 40)])
    data = b"\n".join(out) + (b"\n" if seed % 2 else b"")
    for eng in ("vllm", "sglang"):
        assert _bytes_path(data, eng) == _lines_path(data, eng)


def test_every_real_log_in_one_stream_reads_the_same_in_bulk_and_line_by_line() -> None:
    """The benchmark's mix (every real log back to back, twice: tracebacks of one log still open when
    the next starts, CRLF and plain lines side by side): the chunk scan, the frame runs and the
    in-place chunks give what reading every line one by one gives, for either grammar."""
    units = [p.read_bytes() for p in ALL_LOGS]
    data = b"".join(u if u.endswith(b"\n") else u + b"\n" for u in units) * 2
    for eng in ("vllm", "sglang"):
        bulk = _run(data, eng, [len(data) // 5, len(data) // 5 + 1, len(data) // 2])
        assert bulk == _lines_path(data, eng)
        assert bulk["lines"] == data.count(b"\n") and bulk["root_cause"] is not None


def test_a_log_without_newlines_keeps_memory_bounded_and_chunking_free() -> None:
    """Megabytes with no newline (a binary dump, a runaway line): cut every MAX_LINE bytes, identically."""
    from servelab.engines.logs.glued import MAX_LINE

    head = GOOD.read_bytes()[:4000]
    data = head + b"x\r" * (MAX_LINE + 12345) + b"\nINFO:     Application startup complete.\n" + b"y" * (MAX_LINE * 2 + 7)
    whole = _run(data, "vllm", [])
    rnd = random.Random(7)
    cuts = sorted(rnd.randrange(len(data)) for _ in range(300))
    assert _run(data, "vllm", cuts) == whole
    an = LogAnalyzer(get_adapter("vllm").grammar)
    for i in range(0, len(data), 65536):
        an.feed(data[i : i + 65536])
        assert len(an._tail) <= MAX_LINE
    an.finish()
    assert dataclasses.asdict(an.snapshot()) == whole
    assert whole["state"] == "ready"


@pytest.mark.parametrize("path", ALL_LOGS, ids=lambda p: p.name)
def test_snapshots_mid_stream_change_nothing(path: Path) -> None:
    """A live viewer asks for a snapshot after every chunk: the final answer must not depend on it."""
    data = path.read_bytes()
    eng = _engine(path)
    an = LogAnalyzer(get_adapter(eng).grammar)
    rnd = random.Random(path.name + "snap")
    i = 0
    while i < len(data):
        j = i + rnd.randint(1, 2048)
        an.feed(data[i:j])
        an.snapshot()
        i = j
    an.finish()
    assert dataclasses.asdict(an.snapshot()) == _run(data, eng, [])
