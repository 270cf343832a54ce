"""Issue #34, batch 26's classes, each as a rule over a family of inputs (the lines are real: fresh-26's
vLLM and SGLang logs, sources on their line 1, recombined):

- vLLM's OpenAI server gathering a request's whole answer (``chat_completion_full_generator``, the twin of
  the streaming generator) and V0's AsyncLLMEngine running one request's stream (``_process_request``)
  run only for a served request: a traceback through them, its top cut by the window, was serving;
- CPython's dump of an exception object it could not print ("object type name: RecursionError",
  "object repr     : RecursionError('maximum recursion depth exceeded')", "lost sys.stderr") names the
  exception that ended the process: a fatal record;
- multiprocessing prints a child's traceback itself ("Process SpawnProcess-1:", frames from ``_bootstrap``):
  an error record above it is not its exception's text (logger.exception's is), so a window that starts
  below that record reads the same cause as the whole log.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.engines.logs.analysis import EVIDENCE_WORDS
from servelab.engines.logs.files import analyze_bytes
from servelab.engines.runs.state import RunState

_SITE = "/home/ma/miniconda3/envs/myenv/lib/python3.9/site-packages/vllm"
_REQUEST = {
    "chat_completion_full_generator": [f'  File "{_SITE}/entrypoints/openai/serving_chat.py", line 360, in chat_completion_full_generator',
                                       "    async for res in result_generator:"],
    "_process_request": [f'  File "{_SITE}/engine/async_llm_engine.py", line 765, in _process_request', "    async for request_output in stream:"],
}
_STARTUP = [f'  File "{_SITE}/entrypoints/openai/api_server.py", line 196, in build_async_engine_client', "    engine_client = build_engine()"]
_INNER = [f'  File "{_SITE}/engine/async_llm_engine.py", line 662, in generate', "    async for output in self._process_output("]


@settings(max_examples=40, deadline=None)
@given(st.sets(st.sampled_from(sorted(_REQUEST)), max_size=2), st.sampled_from(["", "6月 10 16:45:05 ma-MS bash[107468]: ", "vllm-0 | "]),
       st.sampled_from(["RuntimeError: CUDA error: an illegal memory access was encountered", "ValueError: bad request state", None]))
def test_a_traceback_through_a_requests_own_frames_was_serving(frames: set[str], prefix: str, end: str | None) -> None:
    lines = ["    return await self.chat_completion_full_generator(" if frames else "    return build_engine()"]
    for name in sorted(frames):
        lines += _REQUEST[name]
    lines += _INNER if frames else _STARTUP
    if end is not None:
        lines.append(end)
    a = analyze_bytes("".join(f"{prefix}{line}\n" for line in lines).encode(), "vllm")
    assert a.state is RunState.CRASHED and a.root_cause is not None, (a.state, a.root_cause)
    assert a.was_ready is bool(frames), (frames, a.was_ready)
    if end is not None:
        assert a.root_cause.exception == end.split(":")[0] and a.root_cause.evidence == EVIDENCE_WORDS["traceback"]


_DUMP = ["object address  : 0x150df025af80", "object refcount : 4", "object type     : 0x151167c6a320"]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["RecursionError", "MemoryError", "KeyboardInterrupt", "torch.OutOfMemoryError"]),
       st.sampled_from(["maximum recursion depth exceeded", "CUDA out of memory", "x"]), st.integers(1, 3), st.sampled_from(["", "[2024-03-01 10:00:00] "]))
def test_pythons_dump_of_an_exception_it_could_not_print_names_it(exc: str, text: str, times: int, stamp: str) -> None:
    block = [*_DUMP, f"object type name: {exc.rsplit('.', 1)[-1]}", f"object repr     : {exc}('{text}')", "lost sys.stderr"]
    lines = [line for _ in range(times) for line in block]
    a = analyze_bytes("".join(f"{stamp}{line}\n" for line in lines).encode(), "sglang")
    named = exc.endswith(("Error", "Exception"))  # a repr of another class (KeyboardInterrupt('x')) is not read as one
    assert (a.state is RunState.CRASHED) is named, a.state
    if named:
        rc = a.root_cause
        assert rc is not None and rc.exception == exc and rc.message == text and rc.evidence == EVIDENCE_WORDS[""], rc
        assert rc.line == 5, rc.line  # the first dump's repr


# multiprocessing prints a child's traceback itself ("Process SpawnProcess-1:", then frames from _bootstrap):
# an error record a few lines above it (the parent's "Worker ... died, exit code: -15") is not its text.
_MP = "/opt/conda/envs/py_3.10/lib/python3.10/multiprocessing/process.py"
_CHILD = [f'  File "{_MP}", line 314, in _bootstrap', "    self.run()", f'  File "{_MP}", line 108, in run',
          "    self._target(*self._args, **self._kwargs)"]
_LOGGED = ['  File "/opt/vllm/vllm/worker/worker.py", line 212, in determine_num_available_blocks', "    self.model_runner.profile_run()"]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["Worker VllmWorkerProcess pid 6855 died, exit code: -15", "Error executing method determine_num_available_blocks"]),
       st.booleans(), st.booleans(), st.sampled_from([None, "RuntimeError: NCCL error: unhandled system error"]))
def test_a_child_traceback_multiprocessing_printed_is_not_the_error_record_above_it(record: str, child: bool, info_between: bool,
                                                                                      end: str | None) -> None:
    lines = ["Process SpawnProcess-1:" if child else "INFO 10-30 13:46:20 worker.py:10] starting",
             f"ERROR 10-30 13:46:27 multiproc_worker_utils.py:120] {record}"]
    if info_between:
        lines.append("INFO 10-30 13:46:27 multiproc_worker_utils.py:123] Killing local vLLM worker processes")
    lines += ["Traceback (most recent call last):", *(_CHILD if child else _LOGGED)]
    if end is not None:
        lines.append(end)
    rc = analyze_bytes("".join(f"{line}\n" for line in lines).encode(), "vllm").root_cause
    assert rc is not None
    if end is not None:  # a complete traceback names its own exception either way
        assert rc.exception == "RuntimeError" and rc.evidence == EVIDENCE_WORDS["traceback"], rc
    elif child:
        assert record not in rc.message and rc.evidence == EVIDENCE_WORDS["traceback cut"], rc
        assert "multiprocessing/process.py:108 in run" in rc.message, rc.message
    else:  # logger.exception(e): the record before its bare traceback is the exception's own text
        assert rc.message == record and rc.evidence == EVIDENCE_WORDS["error line"], rc
