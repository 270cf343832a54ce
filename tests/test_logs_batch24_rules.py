"""Issue #34, batch 24's classes, each as a rule over a family of inputs (the lines are real: fresh-24's
logs, sources on their line 1, recombined):

- Ray's exception line names its cause in parentheses ("ray.exceptions.RayTaskError(TimeoutError):
  ray::A.f() (pid=7, ...)"): that cause is the exception; the task's own traceback follows it, and its
  exception line, when shown, is the answer; cut, the answer is a cut traceback that names Ray's cause;
- an exception whose class has no Error/Exception suffix ends a traceback when it is a dotted class
  ("triton.runtime.errors.OutOfResources: ...") or the one the code line above raises;
- logging's dump of a record it could not print ("Call stack:" frames down to the logger call, then
  "Message: '...'") is no failure: the record is read in its place;
- vLLM V0's AsyncLLMEngine step frames (engine_step, step_async) and LLMEngine.step running its workers,
  and V1's execute_model under vllm/v1/, run only while requests are served;
- a process tag with its colour code's remains (the ESC lost in a copy: "(Worker_TP5 pid=422)[0;0m ",
  "36m(EngineCore_DP0 pid=820)0m ") is the engine's own tag, never a capture prefix;
- a stamp before Ray's tag ("[2026-03-12 11:50:36] (TaskRunner pid=7)   File ...") is that process's line;
- a platform's stamp-and-names line never swallows a bare exception name ("...Z NotImplementedError");
- Python logging with its logger's name ("2025-03-18 10:24:40,134 - __main__ - WARNING - ...") is a line's
  start, not a capture prefix.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.engines.logs.analysis import EVIDENCE_WORDS
from servelab.engines.logs.files import analyze_bytes
from servelab.engines.runs.state import RunState

_INNER = st.sampled_from(["TimeoutError", "ActorDiedError", "RuntimeError", "ValueError", "OutOfMemoryError"])
_PID = st.integers(2, 4_000_000)


def _log(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode()


_DRIVER = [
    "Traceback (most recent call last):",
    '  File "/export/home/pan/slime/train.py", line 69, in train',
    "    rollout_data_ref = ray.get(rollout_manager.generate.remote(rollout_id))",
    '  File "/usr/local/lib/python3.12/site-packages/ray/_private/worker.py", line 1015, in get_objects',
    "    raise value.as_instanceof_cause()",
]
_TASK = [
    '  File "/mnt/project/verl/verl/trainer/main_ppo.py", line 241, in run',
    "    trainer.fit()",
    '  File "/mnt/project/verl/verl/single_controller/ray/base.py", line 50, in __call__',
    "    output = ray.get(output)",
]


@settings(max_examples=40, deadline=None)
@given(_INNER, _PID, st.sampled_from(["ray.exceptions.", ""]), st.sampled_from(["end", "own", "cut"]), st.booleans())
def test_rays_exception_line_names_its_cause_and_the_tasks_traceback_after_it(inner: str, pid: int, module: str, after: str, headless: bool) -> None:
    ray_line = f"{module}RayTaskError({inner}): ray::TaskRunner.run() (pid={pid}, ip=172.26.255.4, actor_id=0009f29497fc3750fe41818b02000000)"
    own = f"ray.exceptions.{inner}: The actor died unexpectedly before finishing this task."
    tail = {"end": [], "own": [*_TASK, own], "cut": _TASK}[after]
    lines = [*(_DRIVER[1:] if headless else _DRIVER), ray_line, *tail]
    a = analyze_bytes(_log(lines), "vllm")
    rc = a.root_cause
    assert a.state == RunState.CRASHED and rc is not None
    assert rc.exception is not None and rc.exception.rsplit(".", 1)[-1] == inner
    if after == "own":
        assert "died unexpectedly" in rc.message and rc.evidence == EVIDENCE_WORDS["traceback"]
    elif after == "cut":
        assert rc.evidence == EVIDENCE_WORDS["traceback cut"] and "base.py:50" in rc.message
    else:
        assert rc.evidence == EVIDENCE_WORDS["traceback"] and f"pid={pid}" in rc.message


_TRITON = [
    '  File "/opt/conda/envs/py_3.9/lib/python3.9/site-packages/triton/compiler/compiler.py", line 385, in _init_handles',
]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["OutOfResources", "CompilationError2", "BackendCompilerFailed", "Stop"]), st.booleans(), st.integers(0, 2))
def test_a_class_without_the_usual_suffix_ends_a_traceback_when_dotted_or_raised_above(name: str, dotted: bool, window: int) -> None:
    code = f'    raise {name}(self.metadata.shared, max_shared, "shared memory")'
    exc = f"{'triton.runtime.errors.' if dotted else ''}{name}: out of resource: shared memory, Required: 131072"
    lines = ["Traceback (most recent call last):", *_TRITON, code, exc][[0, 2, 3][window] :]
    a = analyze_bytes(_log(lines), "sglang")
    named = dotted or window < 2  # alone, an undotted name is not known to be an exception
    assert (a.root_cause is not None and a.root_cause.exception is not None and a.root_cause.exception.endswith(name)) is named
    if named:
        assert a.state == RunState.CRASHED and "out of resource" in (a.root_cause.message if a.root_cause else "")
    # a capitalised word after a code line that raises something else, undotted, ends nothing: the
    # traceback is cut, named by its raise statement
    other = ["Traceback (most recent call last):", *_TRITON, "    raise RuntimeError(x)", f"{name}: something"]
    b = analyze_bytes(_log(other), "sglang")
    assert b.root_cause is not None and b.root_cause.exception == "RuntimeError" and b.root_cause.evidence == EVIDENCE_WORDS["traceback cut"]


_CALL_STACK = [
    '  File "/usr/local/lib/python3.11/site-packages/uvloop/__init__.py", line 105, in run',
    "    return self._loop.run_until_complete(task)",
    '  File "/usr/local/lib/python3.11/site-packages/sglang/srt/entrypoints/engine.py", line 343, in sigquit_handler',
]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["logger.error(", "logger.warning(", "logging.error(", "log.info("]), st.sampled_from(["'", '"']), st.booleans(), st.booleans())
def test_loggings_dump_of_a_record_it_could_not_print_reads_the_record(call: str, quote: str, fatal: bool, header: bool) -> None:
    record = "Received sigquit from a child proces. It usually means the child failed." if fatal else "Attempt 56: Please wait for the server to become ready..."
    lines = [*(["--- Logging error ---", "Call stack:"] if header else []), *_CALL_STACK, f"    {call}", f"Message: {quote}{record}{quote}", "Arguments: ()"]
    a = analyze_bytes(_log(lines), "sglang")
    if fatal:
        assert a.state == RunState.CRASHED and a.root_cause is not None
        assert a.root_cause.message.startswith("Received sigquit from a child proces") and a.root_cause.evidence == EVIDENCE_WORDS["process death"]
    else:
        assert a.state != RunState.CRASHED and a.root_cause is None  # the call's stack is not a failure


_V0_LOOP = [
    "Traceback (most recent call last):",
    '  File "/prod_venv/lib/python3.10/site-packages/vllm/engine/async_llm_engine.py", line 733, in run_engine_loop',
    "    result = task.result()",
    '  File "/prod_venv/lib/python3.10/site-packages/vllm/engine/async_llm_engine.py", line 673, in engine_step',
    "    request_outputs = await self.engine.step_async(virtual_engine)",
    '  File "/prod_venv/lib/python3.10/site-packages/vllm/engine/async_llm_engine.py", line 340, in step_async',
    "    outputs = await self.model_executor.execute_model_async(",
]
_V0_STEP = [
    '  File "/mnt/disk2/test/vllm/vllm/engine/llm_engine.py", line 563, in step',
    "    output = self._run_workers(",
    '  File "/mnt/disk2/test/vllm/vllm/engine/llm_engine.py", line 711, in _run_workers',
    "    all_outputs = ray.get(all_outputs)",
]
_V1_WORKER = [
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/worker_base.py", line 369, in execute_model',
    "    return self.worker.execute_model(scheduler_output, *args, **kwargs)",
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py", line 623, in execute_model',
    "    output = self.model_runner.execute_model(scheduler_output, intermediate_tensors)",
]


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["v0 loop", "v0 step", "v1 worker"]), st.integers(0, 3), st.booleans())
def test_vllms_request_only_frames_mean_the_server_was_serving(which: str, cut_top: int, exception: bool) -> None:
    frames = {"v0 loop": _V0_LOOP, "v0 step": _V0_STEP, "v1 worker": _V1_WORKER}[which]
    end = ["RuntimeError: CUDA error: an illegal memory access was encountered"] if exception else []
    top = min(cut_top, 1 if which == "v0 loop" else 0)  # the cut keeps the frames the rule reads
    a = analyze_bytes(_log([*frames[top:], *end]), "vllm")
    assert a.state == RunState.CRASHED and a.was_ready
    # the same functions elsewhere: V0's layout (no v1/), or the step without its workers, are start-up's too
    elsewhere = {
        "v0 loop": [ln.replace("engine_step", "engine_init").replace("step_async", "init_async") for ln in frames],
        "v0 step": frames[:2],
        "v1 worker": [ln.replace("/vllm/v1/", "/vllm/") for ln in frames],
    }[which]
    assert not analyze_bytes(_log([*elsewhere, *end]), "vllm").was_ready


_LINES = [
    "ERROR 01-19 04:06:43 [multiproc_executor.py:824] WorkerProc hit an exception.",
    "ERROR 01-19 04:06:43 [multiproc_executor.py:824] Traceback (most recent call last):",
    'ERROR 01-19 04:06:43 [multiproc_executor.py:824]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py", line 623, in execute_model',
    "ERROR 01-19 04:06:43 [multiproc_executor.py:824]     output = self.model_runner.execute_model(scheduler_output)",
    "ERROR 01-19 04:06:43 [multiproc_executor.py:824] RuntimeError: NCCL error: unhandled cuda error",
]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["Worker_TP5", "EngineCore_DP0", "APIServer"]), _PID, st.sampled_from(["[0;0m", "0m", "[1;36m"]), st.sampled_from(["", "36m", "[1;36m"]))
def test_a_process_tag_with_its_colour_codes_remains_is_the_engines_own(proc: str, pid: int, after: str, before: str) -> None:
    tagged = _log([f"{before}({proc} pid={pid}){after} {ln}" for ln in _LINES])
    a = analyze_bytes(tagged, "vllm")
    assert a.prefix is None  # the engine's own tag: nothing was captured behind a prefix
    assert a.state == RunState.CRASHED and a.root_cause is not None and a.root_cause.exception == "RuntimeError"
    assert a.root_cause.process == proc and "NCCL error" in a.root_cause.message


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["TaskRunner", "WorkerDict", "RolloutManager"]), _PID, st.integers(0, 59))
def test_a_stamp_before_rays_tag_is_that_processs_line(proc: str, pid: int, second: int) -> None:
    lines = [f"[2026-03-12 11:50:{second:02d}] ({proc} pid={pid}) {ln}" for ln in [*_TASK, "    raise self._exception"]]
    a = analyze_bytes(_log(lines), "sglang")
    assert a.state == RunState.CRASHED and a.root_cause is not None and a.root_cause.process == proc
    assert a.root_cause.evidence == EVIDENCE_WORDS["traceback cut"]


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["NotImplementedError", "KeyboardInterrupt", "SystemExit", "asyncio.exceptions.CancelledError2Exception"]), st.integers(0, 9))
def test_a_platform_line_never_swallows_a_bare_exception_name(name: str, nanos: int) -> None:
    body = [
        'File "/usr/local/lib/python3.10/dist-packages/vllm/attention/backends/abstract.py", line 59, in get_state_cls',
        f"    raise {name.rsplit('.', 1)[-1]}",
        name,
        "...",
    ]
    stamped = _log([f"2026-12-01T12:00:0{i}.00000{nanos}Z {ln}" for i, ln in enumerate(body)])
    a, bare = analyze_bytes(stamped, "vllm"), analyze_bytes(_log(body), "vllm")
    assert a.prefix is not None and a.prefix.dropped == 0 and not a.prefix.platform_shapes
    assert a.root_cause is not None and bare.root_cause is not None and a.root_cause.exception == bare.root_cause.exception


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["__main__", "olmocr.pipeline", "xinference.api"]), st.sampled_from(["WARNING", "INFO", "ERROR"]), st.integers(10, 99))
def test_python_logging_with_its_loggers_name_is_a_lines_start_not_a_prefix(name: str, level: str, attempt: int) -> None:
    lines = [f"2025-03-18 10:24:{attempt - k:02d},134 - {name} - {level} - Attempt {attempt - k}: Please wait for sglang server to become ready..." for k in range(8)]
    a = analyze_bytes(_log([*reversed(lines), "Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:33<00:36, 18.44s/it]"]), "sglang")
    assert a.prefix is None


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["EngineCore_DP0", "Worker_TP1", "APIServer"]), _PID, st.sampled_from(["", " ", "[0;0m "]))
def test_a_process_tag_alone_is_that_processs_blank_line(proc: str, pid: int, after: str) -> None:
    """A tag with nothing after it (the blank line of a traceback, its trailing space stripped by a
    paste) is the process's blank line, however the tag ends."""
    from servelab.engines.logs.grammar import parse_header

    h = parse_header(f"({proc} pid={pid}){after}".rstrip(" ") if after != " " else f"({proc} pid={pid}) ")
    assert h.process == proc and h.msg.strip() == ""
