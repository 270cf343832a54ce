"""Issue #34, batch 19's classes: a native crash report glued into a traceback's line, and a front
process's cut traceback after a deeper process's wrapper.

- CPython's faulthandler (and any native crash report) is printed by its own thread whenever the crash
  happens: glued into another thread's frame line ('File "x.pyFatal Python error: Aborted, line 120')
  it is still the crash, and it outranks the frames it cut;
- an engine core's complete traceback ending in a wrapper ("WorkerProc initialization failed ... See
  stack trace for root cause") followed by the API server's own traceback, cut before its exception
  line, is only a wrapper: the API server's frames re-raise it and name no cause. A deeper process's
  cut traceback after the same wrapper still says where.

The lines are real (fresh-19's SGLang-10407 and vllm-ascend-2579, sources on their line 1), recombined.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.engines.logs.files import analyze_bytes
from servelab.engines.runs.state import RunState

_DUMP = [
    'Thread 0x00007f0159038740 (most recent call first):',
    '  File "/opt/conda/lib/python3.10/threading.py", line 320 in wait',
    '  File "/opt/conda/lib/python3.10/queue.py", line 171 in get',
    '  File "/opt/conda/lib/python3.10/site-packages/sglang/srt/managers/tp_worker_overlap_thread.py", line 211 in resolve_last_batch_result',
    '  File "/opt/conda/lib/python3.10/site-packages/sglang/srt/managers/scheduler.py", line 860 in event_loop_overlap',
]
_REPORTS = [
    ('Fatal Python error: "Aborted"', 'Fatal Python error: "Aborted'),
    ("Fatal Python error: Segmentation fault", "Fatal Python error: Segmentation fault"),
    ("!!!!!!! Segfault encountered !!!!!!!", "Segfault encountered"),
    ("Segmentation fault (core dumped)", "Segmentation fault (core dumped)"),
]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(_REPORTS), st.integers(1, len(_DUMP) - 1), st.data())
def test_a_native_crash_glued_into_a_frame_line_is_the_crash(report: tuple[str, str], row: int, data: st.DataObject) -> None:
    text, said = report
    line = _DUMP[row]
    at = data.draw(st.integers(line.index('File "') + 6, len(line)))
    lines = [*_DUMP[:row], line[:at] + text + line[at:], *_DUMP[row + 1 :]]
    a = analyze_bytes(("\n".join(lines) + "\n").encode(), "sglang")
    assert a.state == RunState.CRASHED
    assert a.root_cause is not None and said in a.root_cause.message, a.root_cause
    assert a.root_cause.line == row + 1


def test_without_the_report_the_thread_stacks_are_a_native_crash_and_the_frames_alone_a_cut_traceback() -> None:
    """The control: without the report, faulthandler's thread header still says a native crash (batch 22's
    class: its "Fatal Python error" above the window); without the header too, the frames say only where."""
    a = analyze_bytes(("\n".join(_DUMP) + "\n").encode(), "sglang")
    assert a.state == RunState.CRASHED and a.root_cause is not None and a.root_cause.exception is None
    assert a.root_cause.message == "Thread 0x00007f0159038740 (most recent call first)" and a.root_cause.line == 1
    assert "native crash" in a.root_cause.evidence
    a = analyze_bytes(("\n".join(_DUMP[1:]) + "\n").encode(), "sglang")
    assert a.root_cause is not None and a.root_cause.exception is None and "cut off" in a.root_cause.message


_CORE = [
    '(EngineCore_0 pid=2930)   File "/vllm-workspace/vllm/vllm/v1/executor/multiproc_executor.py", line 96, in _init_executor',
    "(EngineCore_0 pid=2930)     self.workers = WorkerProc.wait_for_ready(unready_workers)",
    '(EngineCore_0 pid=2930)   File "/vllm-workspace/vllm/vllm/v1/executor/multiproc_executor.py", line 478, in wait_for_ready',
    "(EngineCore_0 pid=2930)     raise e from None",
    "(EngineCore_0 pid=2930) Exception: WorkerProc initialization failed due to an exception in a background process. See stack trace for root cause.",
]


def _cut(prefix: str, frames: int) -> list[str]:
    out = [f"{prefix} Traceback (most recent call last):"]
    for i in range(frames):
        out += [f'{prefix}   File "/vllm-workspace/vllm/vllm/entrypoints/cli/main.py", line {54 + i}, in main', f"{prefix}     args.dispatch_function(args)"]
    return out


@given(st.integers(1, 4), st.sampled_from(["(APIServer pid=2660)", "(EngineCore_0 pid=2930)"]))
def test_a_front_process_cut_traceback_after_a_deeper_wrapper_is_that_wrapper(frames: int, front: str) -> None:
    a = analyze_bytes(("\n".join([*_CORE, *_cut(front, frames)]) + "\n").encode(), "vllm")
    assert a.state == RunState.CRASHED
    assert a.root_cause is None, a.root_cause
    assert a.hint is not None and "only a wrapper" in a.hint and "WorkerProc initialization failed" in a.hint


@given(st.integers(1, 4))
def test_a_deeper_process_cut_traceback_after_the_wrapper_still_says_where(frames: int) -> None:
    a = analyze_bytes(("\n".join([*_CORE, *_cut("(VllmWorker rank=0 pid=3001)", frames)]) + "\n").encode(), "vllm")
    assert a.root_cause is not None and a.root_cause.exception is None and "cut off" in a.root_cause.message
    assert a.root_cause.line == len(_CORE) + 1


# -- batch 20's classes: a line in Markdown bold, a process tag in brackets, vLLM's front end up ------------------
_TB = [
    "Traceback (most recent call last):",
    '  File "/home/nvidia/projects/sglang/python/sglang/srt/utils.py", line 401, in <listcomp>',
    "    maybe_offload_to_cpu(layer_fn(idx=idx, prefix=add_prefix(idx, prefix)))",
]


@given(st.sampled_from(["**{}**", "`{}`", "**{}", "``{}``"]), st.sampled_from(["TypeError: f() got an unexpected keyword argument 'idx'", "KeyError: 'lm_head.weight'"]))
def test_an_exception_line_pasted_in_markdown_emphasis_ends_its_traceback(wrap: str, line: str) -> None:
    a = analyze_bytes(("\n".join([*_TB, wrap.format(line)]) + "\n").encode(), "sglang")
    assert a.root_cause is not None and a.root_cause.exception == line.split(":")[0], a.root_cause
    assert a.root_cause.message.startswith(line.split(": ", 1)[1].strip("'")[:10]) or line.split(": ", 1)[1] in a.root_cause.message


@given(st.sampled_from(["Worker_DP0_TP0_EP0", "EngineCore_DP0", "APIServer"]), st.integers(1, 99999))
def test_a_process_tag_in_brackets_reads_as_the_parenthesised_one(proc: str, pid: int) -> None:
    lines = [
        "INFO 07-23 02:43:54 [weight_utils.py:856] Prefetching checkpoint files: 70% (8/11)",
        "ERROR 07-23 02:43:55 [core.py:700] EngineCore failed to start.",
        "ERROR 07-23 02:43:55 [core.py:701] Traceback (most recent call last):",
        'ERROR 07-23 02:43:55 [core.py:701]   File "/vllm/v1/engine/core.py", line 690, in run_engine_core',
        "ERROR 07-23 02:43:55 [core.py:701]     raise ValueError(\"bad\")",
        "ERROR 07-23 02:43:55 [core.py:701] ValueError: bad",
    ]
    bracket = analyze_bytes(("\n".join(f"[{proc} pid={pid}] {ln}" for ln in lines) + "\n").encode(), "vllm")
    paren = analyze_bytes(("\n".join(f"({proc} pid={pid}) {ln}" for ln in lines) + "\n").encode(), "vllm")
    assert bracket.state == paren.state == RunState.CRASHED
    assert bracket.root_cause is not None and paren.root_cause is not None
    assert (bracket.root_cause.exception, bracket.root_cause.message, bracket.root_cause.process) == (paren.root_cause.exception, paren.root_cause.message, paren.root_cause.process) == ("ValueError", "bad", proc)
    assert bracket.prefix is None


@given(st.sampled_from(["Starting vLLM API server 0 on http://0.0.0.0:8000", "Starting vLLM server on http://[::]:8001", "Available routes are:", "Route: /version, Methods: GET"]), st.booleans())
def test_vllm_is_ready_once_its_front_end_starts_and_a_later_crash_was_after_ready(line: str, crash: bool) -> None:
    """vLLM binds its port before building the engine, so its front end's start line comes once the engine is up."""
    lines = ["(EngineCore_DP0 pid=9) INFO 02-03 19:00:01 [core.py:210] init engine (profile, create kv cache, warmup model) took 22.51 seconds", f"(APIServer pid=1) INFO 02-03 19:00:05 [api_server.py:946] {line}"]
    if crash:
        lines.append("(EngineCore_DP0 pid=9) ERROR 02-03 19:00:09 [core.py:800] EngineCore encountered a fatal error.")
    a = analyze_bytes(("\n".join(lines) + "\n").encode(), "vllm")
    assert a.was_ready and a.state == (RunState.CRASHED if crash else RunState.READY)
    if not crash:  # the ready stage, once done, stays done (its own start rule on the same line does not reopen it)
        assert [(s.name, s.status.value) for s in a.stages][-1] == ("ready", "done")


@given(st.sampled_from(["signum=None, frame=None. ", "signum=3, frame=<frame at 0x7f>. ", ""]), st.integers(1, 4))
def test_sglangs_2026_sigquit_line_is_a_childs_death(args: str, repeats: int) -> None:
    """SGLang's launcher says a child failed in its 2026 wording too ("SIGQUIT received. signum=None,
    frame=None. It usually means one child failed."), as it did in the older one ("Received sigquit
    from a child process"): a death with no traceback, however often the handler repeats it."""
    lines = ["[2026-08-23 09:11:09] No live scheduler processes found; skipping py-spy and CUDA coredump."]
    lines += [f"[2026-08-23 09:11:09] SIGQUIT received. {args}It usually means one child failed.", "[2026-08-23 09:11:09] kill_process_tree called: parent_pid=1, include_parent=True, pid=1"] * repeats
    a = analyze_bytes(("\n".join(lines) + "\n").encode(), "sglang")
    assert a.state == RunState.CRASHED and a.root_cause is not None and a.root_cause.exception is None
    assert "It usually means one child failed" in a.root_cause.message and a.root_cause.line == 2
