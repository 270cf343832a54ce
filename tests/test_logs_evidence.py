"""Issue #20: readiness from serving evidence, and fatal evidence without a traceback.

The lines are real: quoted from public issues and logs (sources beside each), or taken from the
real logs under tests/data/logs. The windows are put together the way excerpts are: a traceback
cut before its exception line, the evidence line before or after it, serving lines before a crash.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.engines.logs.analyzer import EAGER_LINES
from servelab.engines.logs.files import analyze_bytes
from servelab.engines.logs.analysis import Analysis
from servelab.engines.runs.state import RunState

DATA = Path(__file__).parent / "data" / "logs"

#: (name, the line, a fragment the root cause's message must hold, a fragment of the hint: the next step)
EVIDENCE = [
    (
        # pytorch's Indexing.cu, as printed in a public issue (behind a tqdm bar that did not end its line)
        "device assertion",
        "  0%|          | 0/15580 [00:00<?, ?it/s]/opt/conda/conda-bld/pytorch_1695392020201/work/aten/src/ATen/native/cuda/"
        "Indexing.cu:1292: indexSelectLargeIndex: block: [222,0,0], thread: [96,0,0] Assertion `srcIndex < srcSelectDimSize` failed.",
        "Assertion `srcIndex < srcSelectDimSize` failed",
        "CUDA_LAUNCH_BLOCKING=1",
    ),
    (
        # the CUDA caching allocator (a SLURM failure catalogue's CUDA OOM case)
        "allocator OOM",
        "[W903 13:41:51.709566905 CUDACachingAllocator.cpp:3934] memory allocation failed with OOM on device 0 while trying "
        "to allocate 42949672960 bytes (free: 33136967680, total: 33668857856).",
        "memory allocation failed with OOM on device 0",
        "--mem-fraction-static",
    ),
    (
        # ProcessGroupNCCL's watchdog (a DeepSpeed run's log in a public repository)
        "NCCL watchdog",
        "[rank1]:[E1218 20:27:21.433063423 ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=131072000, NumelOut=131072000, Timeout(ms)=600000) ran for 600081 "
        "milliseconds before timing out.",
        "OpType=BROADCAST",
        "NCCL_DEBUG=INFO",
    ),
    ("C++ terminate", "terminate called after throwing an instance of 'c10::DistBackendError'", "c10::DistBackendError", "NCCL_DEBUG=INFO"),
    (
        # vllm-project/vllm issue 6823's title line
        "worker signal exit",
        "ERROR 07-26 14:50:35 multiproc_worker_utils.py:120] Worker VllmWorkerProcess pid 214281 died, exit code: -11",
        "died, exit code: -11",
        "SIGSEGV",
    ),
]

#: A real traceback cut before its exception line (EngineCore's frames in the Marlin repack OOM log),
#: and that exception line.
_MARLIN = (DATA / "vllm-marlin-repack-oom-headless-club-3090-60.log").read_text().splitlines()
CUT_TRACEBACK = _MARLIN[4:10]
EXCEPTION_LINE = _MARLIN[10]
assert 'File "' in CUT_TRACEBACK[0] and EXCEPTION_LINE.endswith("RuntimeError: CUDA driver error: out of memory")


def _analyze(lines: list[str]) -> Analysis:
    return analyze_bytes(("\n".join(lines) + "\n").encode(), "vllm")


def test_a_cut_traceback_alone_is_cut_off() -> None:
    a = _analyze(CUT_TRACEBACK)
    assert a.state == RunState.CRASHED and a.root_cause is not None and "cut off" in a.root_cause.message


@pytest.mark.parametrize(("name", "line", "fragment", "hint"), EVIDENCE, ids=[e[0] for e in EVIDENCE])
@pytest.mark.parametrize("before", [True, False], ids=["evidence first", "traceback first"])
def test_fatal_evidence_is_the_root_cause_of_a_traceback_cut_before_its_exception(name: str, line: str, fragment: str, hint: str, before: bool) -> None:
    a = _analyze([line, *CUT_TRACEBACK] if before else [*CUT_TRACEBACK, line])
    rc = a.root_cause
    assert a.state == RunState.CRASHED and rc is not None
    assert rc.exception is None and fragment in rc.message and "cut off" not in rc.message
    # the cut traceback is its context: its frames, and where it broke
    assert any("gptq_marlin_repack" in x for x in rc.excerpt) and rc.where is not None
    assert a.hint is not None and hint in a.hint


@pytest.mark.parametrize(("name", "line", "fragment", "hint"), EVIDENCE, ids=[e[0] for e in EVIDENCE])
def test_a_traceback_with_its_exception_line_still_wins(name: str, line: str, fragment: str, hint: str) -> None:
    for lines in ([line, *CUT_TRACEBACK, EXCEPTION_LINE], [*CUT_TRACEBACK, EXCEPTION_LINE, line]):
        rc = _analyze(lines).root_cause
        assert rc is not None and rc.exception == "RuntimeError" and "out of memory" in rc.message


_N = len(EVIDENCE)
#: Every rotation of the lines, forwards and backwards: each line comes first, last, and between.
ORDERS = [tuple((i + k) % _N for i in range(_N))[::d] for k in range(_N) for d in (1, -1)]


@pytest.mark.parametrize("order", ORDERS, ids=str)
def test_the_strongest_evidence_wins_wherever_it_is(order: tuple[int, ...]) -> None:
    """Ranked: the assertion over the allocator's OOM over the watchdog over terminate over a signal exit."""
    rc = _analyze([EVIDENCE[i][1] for i in order]).root_cause
    assert rc is not None and EVIDENCE[0][2] in rc.message
    # without the strongest, the next one wins
    rc = _analyze([EVIDENCE[i][1] for i in order if i != 0]).root_cause
    assert rc is not None and EVIDENCE[1][2] in rc.message


def test_among_equal_evidence_the_earliest_wins() -> None:
    first = EVIDENCE[4][1]
    later = first.replace("pid 214281", "pid 214282").replace("-11", "-6")
    for lines, want in (([first, later], "-11"), ([later, first], "-6")):
        rc = _analyze(lines).root_cause
        assert rc is not None and rc.message.endswith(want)


def test_the_allocator_warning_alone_does_not_fail_a_serving_run() -> None:
    """The caching allocator frees its cache and retries: its OOM line names a cause only when the run failed."""
    served = '(APIServer pid=100) INFO:     127.0.0.1:41234 - "POST /v1/chat/completions HTTP/1.1" 200 OK'
    a = _analyze([served, EVIDENCE[1][1], served])
    assert a.state == RunState.READY and a.root_cause is None


# -- readiness from serving evidence ----------------------------------------------------------------

#: The held-out SGLang startup that ends with a served /get_model_info (sgl-project/sglang PR 14422).
SGLANG_READY = [
    "[2025-12-04 21:00:22] INFO:     Application startup complete.",
    "[2025-12-04 21:00:22] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)",
    '[2025-12-04 21:00:23] INFO:     127.0.0.1:55770 - "GET /get_model_info HTTP/1.1" 200 OK',
]
#: The scheduler's crash in the held-out sglang PR 3730 log, from its exception line on.
_PR3730 = (Path(__file__).resolve().parent.parent.parent / "shared" / "logs" / "2026-12" / "sglang-serving-device-side-assert-int8-pr3730.log")


def test_an_sglang_access_line_means_ready_and_a_crash_after_it_was_ready() -> None:
    a = analyze_bytes(("\n".join(SGLANG_READY) + "\n").encode(), "sglang")
    assert a.state == RunState.READY and a.was_ready
    crash = SGLANG_READY + ["[2025-12-04 21:01:00 TP0] Scheduler hit an exception: Traceback (most recent call last):", '  File "x.py", line 1, in f', "RuntimeError: CUDA error: device-side assert triggered"]
    a = analyze_bytes(("\n".join(crash) + "\n").encode(), "sglang")
    assert a.state == RunState.CRASHED and a.was_ready and a.failed_stage is None


@pytest.mark.parametrize(
    "request_line", ['POST /v1/chat/completions HTTP/1.1" 404 Not Found', 'POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error', 'GET /metrics HTTP/1.1" 200 OK']
)
def test_an_access_line_that_failed_or_a_scrape_shows_only_that_the_server_was_up(request_line: str) -> None:
    """A failed request, or a /metrics scrape (answered even after the engine died), says the HTTP server was up."""
    lines = [f'(APIServer pid=100) INFO:     127.0.0.1:41234 - "{request_line}']
    a = _analyze(lines)
    assert a.state != RunState.READY and not a.was_ready
    a = _analyze(lines + CUT_TRACEBACK + [EXCEPTION_LINE])
    assert a.state == RunState.CRASHED and a.was_ready


def test_an_error_raised_while_serving_means_was_ready_even_after_the_fatal_line() -> None:
    """vllm-project/vllm issue 40756: the front end's stream generator fails after the engine core died."""
    lines = [*CUT_TRACEBACK, EXCEPTION_LINE, "(APIServer pid=100) ERROR 05-05 14:59:18 [serving.py:1137] Error in chat completion stream generator."]
    a = _analyze(lines)
    assert a.state == RunState.CRASHED and a.was_ready
    assert not _analyze([*CUT_TRACEBACK, EXCEPTION_LINE]).was_ready


def test_a_failure_in_the_schedulers_event_loop_was_while_serving() -> None:
    text = _PR3730.read_text()
    a = analyze_bytes(text.encode(), "sglang")
    assert a.state == RunState.CRASHED and a.was_ready
    # the same traceback without its event-loop frames is a crash at an unknown time
    lines = [ln for ln in text.splitlines() if "event_loop" not in ln and "self.run_batch(batch)" not in ln]
    assert not analyze_bytes(("\n".join(lines) + "\n").encode(), "sglang").was_ready


#: A timestamped line that moves nothing (the chunk scan skips it): after it, and past the lines read
#: one by one at a log's head, only lines the Hyperscan prefilter lets through reach the grammar.
_CHATTER = "(APIServer pid=100) INFO 05-05 14:59:18 [loggers.py:123] nothing to see"


@pytest.mark.parametrize(("name", "line", "fragment", "hint"), EVIDENCE, ids=[e[0] for e in EVIDENCE])
def test_fatal_evidence_passes_the_chunk_scan_deep_in_a_long_log(name: str, line: str, fragment: str, hint: str) -> None:
    a = _analyze([_CHATTER] * (EAGER_LINES + 100) + [line] + [_CHATTER] * 100 + CUT_TRACEBACK)
    rc = a.root_cause
    assert rc is not None and fragment in rc.message


@pytest.mark.parametrize(
    "line",
    [
        '(APIServer pid=100) INFO:     127.0.0.1:41234 - "GET /health HTTP/1.1" 200 OK',
        "(APIServer pid=100) ERROR 05-05 14:59:18 [serving.py:1137] Error in chat completion stream generator.",
        "(APIServer pid=100) INFO 05-05 14:59:18 [async_llm.py:252] Added request chatcmpl-c78d39a6d1d8469f90f3bda9bd41ca6a.",
        "(EngineCore_DP0 pid=101) ERROR 05-05 14:59:18 [core.py:398] EngineCore encountered a fatal error.",
        "(APIServer pid=100) INFO 05-05 14:59:18 [loggers.py:123] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: 20.0 tokens/s, Running: 1 reqs",
    ],
)
def test_serving_evidence_passes_the_chunk_scan_deep_in_a_long_log(line: str) -> None:
    a = _analyze([_CHATTER] * (EAGER_LINES + 100) + [line] + [_CHATTER] * 100 + CUT_TRACEBACK + [EXCEPTION_LINE])
    assert a.state == RunState.CRASHED and a.was_ready


@pytest.mark.parametrize(("code", "fatal"), [("-6", True), ("-9", True), ("-11", True), ("-15", False), ("-2", False)])
def test_a_worker_signal_exit_is_fatal_unless_it_was_told_to_stop(code: str, fatal: bool) -> None:
    """vllm-project/vllm issues 6042 (-6), 6823 (-11), 15295 (-15: SIGTERM, the worker was stopped)."""
    a = _analyze([f"ERROR 07-01 13:54:43 multiproc_worker_utils.py:120] Worker VllmWorkerProcess pid 1159 died, exit code: {code}"])
    assert (a.state == RunState.CRASHED) is fatal
    if fatal:
        assert a.root_cause is not None and a.root_cause.message.endswith(code) and a.hint is not None


#: Real SGLang prefill lines: 0.4.x ("Prefill batch.", sglang 11948's log) and 2026 ("Prefill batch,", a real CPU run).
PREFILL = [
    "[2025-10-22 10:27:56 TP0] Prefill batch. #new-seq: 1, #new-token: 28, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0, ",
    "[2026-12-01 06:17:30] Prefill batch, #new-seq: 1, #new-token: 18, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0, "
    "#pending-token: 0, cpu graph: False, input throughput (token/s): 13.70",
]


@pytest.mark.parametrize("line", PREFILL)
def test_an_sglang_prefill_batch_is_a_served_request(line: str) -> None:
    a = analyze_bytes((line + "\n").encode(), "sglang")
    assert a.state == RunState.READY and a.was_ready


_DIST = DATA / "vllm-terminate-distbackenderror-execute-model-cut-20170.log"


def test_execute_model_called_by_a_workers_busy_loop_was_while_serving() -> None:
    """vllm-project/vllm issue 20170: a V1 worker's busy loop runs execute_model for a scheduled batch.
    V1 calls execute_model (files under vllm/v1/) for nothing else, so its frames are serving evidence
    even where a window cut the busy loop's frame. The same frames in V0's layout (no v1/ folder)
    without the busy loop are not (V0's profile_run calls execute_model at startup), nor is the busy
    loop alone (its start-up calls: determine_available_memory, ...)."""
    lines = _DIST.read_text().splitlines()
    a = _analyze(lines)
    assert a.state == RunState.CRASHED and a.was_ready and a.failed_stage is None
    assert any("/vllm/v1/" in ln and ", in execute_model" in ln for ln in lines)
    busy = [i for i, ln in enumerate(lines) if ", in worker_busy_loop" in ln]
    assert busy
    without_loop = [ln for i, ln in enumerate(lines) if i not in busy and i - 1 not in busy]
    assert _analyze(without_loop).was_ready
    v0 = [ln.replace("/vllm/v1/", "/vllm/") for ln in lines]
    assert _analyze(v0).was_ready  # the busy loop's call
    assert not _analyze([ln.replace("/vllm/v1/", "/vllm/") for ln in without_loop]).was_ready
    without_step = [ln for ln in lines if ", in execute_model" not in ln]
    assert not _analyze(without_step).was_ready
    # the callee before its caller (another traceback's order) does not count either
    step = next(i for i, ln in enumerate(v0) if ", in execute_model" in ln)
    swapped = list(v0)
    swapped[busy[0]], swapped[step] = swapped[step], swapped[busy[0]]
    assert not _analyze(swapped).was_ready


_ADDED = DATA / "vllm-serving-added-requests-then-enginecore-fatal-cut-17276.log"


def test_an_added_request_means_ready_and_a_crash_after_it_was_ready() -> None:
    """vllm-project/vllm issue 17276: async_llm.py's "Added request" lines, then the engine core fails."""
    lines = _ADDED.read_text().splitlines()
    added = [ln for ln in lines if "Added request " in ln]
    assert added
    a = _analyze(added)
    assert a.state == RunState.READY and a.was_ready
    a = _analyze(lines)
    assert a.state == RunState.CRASHED and a.was_ready and a.failed_stage is None


def test_enginecore_encountered_a_fatal_error_is_a_busy_loop_failure_not_a_startup_failure() -> None:
    """core.py run_engine_core: "encountered a fatal error" once EngineCore was built, "failed to start" before."""
    lines = [ln for ln in _ADDED.read_text().splitlines() if "Added request " not in ln]
    a = _analyze(lines)
    assert a.state == RunState.CRASHED and a.was_ready
    startup = [ln.replace("EngineCore encountered a fatal error.", "EngineCore failed to start.") for ln in lines]
    assert startup != lines
    a = _analyze(startup)
    assert a.state == RunState.CRASHED and not a.was_ready


_DEAD = DATA / "vllm-chat-stream-enginedead-then-enginecore-traceback-cut-lmcache-2306.log"


def test_enginedead_raised_in_the_output_handler_was_while_serving() -> None:
    """LMCache issue 2306: AsyncLLM.output_handler reads the outputs of an engine core that is up, and
    EngineDeadError itself is raised only there or when a request is added (a failure while starting is
    "Engine core initialization failed"): without its output_handler frame the window still shows the
    run was up; with the start-up wrapper in its place it does not."""
    lines = _DEAD.read_text().splitlines()
    a = _analyze(lines)
    assert a.state == RunState.CRASHED and a.was_ready
    at = next(i for i, ln in enumerate(lines) if ", in output_handler" in ln)
    cut = lines[:at] + lines[at + 2 :]
    a = _analyze(cut)
    assert a.state == RunState.CRASHED and a.was_ready
    startup = [ln.replace("EngineCore encountered an issue. See stack trace (above) for the root cause.", "Engine core initialization failed. See root cause above.") for ln in cut]
    assert startup != cut
    a = _analyze(startup)
    assert a.state == RunState.CRASHED and not a.was_ready


_BOXED = DATA / "sglang-logviewer-box-prefix-event-loop-overlap-cut-4017.log"


def test_a_frames_call_of_the_event_loop_was_while_serving_when_the_window_cuts_its_frame() -> None:
    """sgl-project/sglang issue 4017: run_scheduler_process's code line calls event_loop_overlap(),
    and the window ends before that frame's own line: the failure was still inside the event loop."""
    # the log viewer's frame ("│ " in front, padding up to a closing "│") taken off as a reader would
    lines = [ln.removeprefix("│ ").rstrip().removesuffix("│").rstrip() for ln in _BOXED.read_text().splitlines()]
    assert not any(", in event_loop" in ln for ln in lines)
    a = analyze_bytes(("\n".join(lines) + "\n").encode(), "sglang")
    assert a.state == RunState.CRASHED and a.was_ready
    lines = [ln for ln in lines if ".event_loop_overlap()" not in ln]
    assert not analyze_bytes(("\n".join(lines) + "\n").encode(), "sglang").was_ready


_TERMINATE = "terminate called after throwing an instance of 'c10::AcceleratorError'"
_WHAT = "  what():  CUDA error: an illegal memory access was encountered"


def test_a_cpp_terminates_what_line_completes_its_message() -> None:
    """christopherowen/spark-vllm-mxfp4-docker issue 5: C++ prints what the exception said on the next line."""
    a = _analyze([*CUT_TRACEBACK, _TERMINATE, _WHAT, "Search for `cudaErrorIllegalAddress' in the CUDA docs"])
    rc = a.root_cause
    assert rc is not None and rc.message.startswith(_TERMINATE) and "illegal memory access was encountered" in rc.message
    assert any("what():" in ln for ln in rc.excerpt)
    # a what() line that does not follow it is another record's
    a = _analyze([*CUT_TRACEBACK, _TERMINATE, _CHATTER, _WHAT])
    rc = a.root_cause
    assert rc is not None and "illegal memory access" not in rc.message
