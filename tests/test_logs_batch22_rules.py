"""Issue #34, batch 22's classes, each as a rule over a family of inputs (the lines are real: fresh-22's
logs, sources on their line 1, recombined):

- PyTorch 2.6's NCCL watchdog wording ("Exception (either an error or timeout) detected by watchdog at
  work: N", "Timeout at NCCL work: N", "Some NCCL operations have failed or timed out") is a fatal record;
  the line that says which (the timeout) outranks the vague one above it;
- faulthandler's thread header ("Current thread 0x... (most recent call first):") is a native crash
  report, its "Fatal Python error" above the window; that error, when shown, still outranks it;
- a header glued before "Traceback (most recent call last):" on one line is said with the cut traceback;
- a traceback cut at its raise statement ("raise RuntimeError(") names that exception;
- another formatter's record (uvicorn's "INFO:") with the engine's dated record glued after it is two records;
- an exception named inside a message after prose ("... with ret = IOError: ...") is no evidence of a
  capture prefix, and spaces alone are a paste's indentation, never a prefix;
- vLLM V0's "Loading model weights took N GB" ends the weights stage.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.engines.logs.files import analyze_bytes
from servelab.engines.runs.state import RunState

_RANK = st.integers(0, 63)
_WORK = st.integers(1, 10**6)


def _log(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode()


@settings(max_examples=40, deadline=None)
@given(_RANK, _WORK, st.booleans(), st.booleans())
def test_pytorch_26_nccl_watchdog_lines_are_a_fatal_record_and_the_timeout_says_which(rank: int, work: int, tagged: bool, vague_first: bool) -> None:
    tag = f"[rank{rank}]:" if tagged else ""
    vague = f"{tag}[E227 16:30:43.526290891 ProcessGroupNCCL.cpp:1785] [PG ID 2 PG GUID 3 Rank {rank}] Exception (either an error or timeout) detected by watchdog at work: {work}, last enqueued NCCL work: {work}, last completed NCCL work: {work - 1}."
    timeout = f"{tag}[E227 16:30:43.526301625 ProcessGroupNCCL.cpp:1834] [PG ID 2 PG GUID 3 Rank {rank}] Timeout at NCCL work: {work}, last enqueued NCCL work: {work}, last completed NCCL work: {work - 1}."
    some = f"{tag}[E227 16:30:43.526306740 ProcessGroupNCCL.cpp:630] [Rank {rank}] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data."
    a = analyze_bytes(_log([vague, timeout, some] if vague_first else [timeout, some]), "sglang")
    assert a.state == RunState.CRASHED and a.root_cause is not None
    assert a.root_cause.message == f"Timeout at NCCL work: {work}" and a.root_cause.exception is None
    assert a.root_cause.evidence == "no traceback: a fatal record"
    alone = analyze_bytes(_log([some]), "sglang")
    assert alone.state == RunState.CRASHED and alone.root_cause is not None and "Some NCCL operations have failed" in alone.root_cause.message


_STACK = [
    '  File "/opt/conda/lib/python3.10/site-packages/sglang/srt/managers/tp_worker_overlap_thread.py", line 122 in forward_thread_func',
    '  File "/opt/conda/lib/python3.10/threading.py", line 953 in run',
]


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["Thread", "Current thread"]), st.integers(1, 2**48), st.sampled_from(["", "(WorkerDict pid=135490) "]), st.booleans())
def test_faulthandlers_thread_header_is_a_native_crash_below_its_fatal_error(word: str, ident: int, tag: str, fatal_shown: bool) -> None:
    header = f"{word} 0x{ident:016x} (most recent call first):"
    lines = [*(["Fatal Python error: Segmentation fault", ""] if fatal_shown else []), header, *_STACK]
    a = analyze_bytes(_log([tag + ln for ln in lines]), "sglang")
    assert a.state == RunState.CRASHED and a.root_cause is not None and a.root_cause.exception is None
    assert a.root_cause.evidence == "no traceback: a native crash report"
    assert a.root_cause.message == ("Fatal Python error: Segmentation fault" if fatal_shown else header[:-1])


_CUT = [
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1816, in run_scheduler_process',
    "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)",
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 240, in __init__',
    "    self.tp_worker = TpWorkerClass(",
]


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["Scheduler hit an exception:", "TpModelWorkerClient hit an exception:", "DataParallelController hit an exception:"]), _RANK, st.integers(1, len(_CUT)))
def test_a_header_glued_before_its_traceback_is_said_with_the_cut_traceback(header: str, rank: int, kept: int) -> None:
    lines = [f"[2025-02-26 12:01:56 TP{rank}] sglang is using nccl==2.21.5", f"[2025-02-26 12:01:56 TP{rank}] {header} Traceback (most recent call last):", *_CUT[:kept]]
    a = analyze_bytes(_log(lines), "sglang")
    assert a.state == RunState.CRASHED and a.root_cause is not None and a.root_cause.exception is None
    assert a.root_cause.message.startswith(f"{header} the traceback is cut off before its exception line"), a.root_cause
    assert a.root_cause.process == f"TP{rank}" and a.root_cause.line == 2
    # without the header, the same traceback says only that it is cut
    bare = analyze_bytes(_log([lines[0], f"[2025-02-26 12:01:56 TP{rank}] Traceback (most recent call last):", *_CUT[:kept]]), "sglang")
    assert bare.root_cause is not None and bare.root_cause.message.startswith("the traceback is cut off"), bare.root_cause


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["RuntimeError", "ValueError", "errors.ConfigError", "torch.OutOfMemoryError", "KVTransferException"]), st.sampled_from(["", "msg", 'f"PD {x}"']))
def test_a_traceback_cut_at_its_raise_statement_names_the_exception(name: str, arg: str) -> None:
    frames = [
        "Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/disaggregation/nixl/conn.py", line 1153, in transfer_worker',
        "    state_xfer_handles = self.maybe_send_extra(",
        '  File "/sgl-workspace/sglang/python/sglang/srt/disaggregation/nixl/conn.py", line 2062, in maybe_send_extra',
    ]
    a = analyze_bytes(_log([*frames, f"    raise {name}({arg}"]), "sglang")
    assert a.root_cause is not None and a.root_cause.exception == name and "cut off" in a.root_cause.message
    for code in ("raise e", "raise self._error(", "raise", "raise exc from None", "return RuntimeError("):
        b = analyze_bytes(_log([*frames, f"    {code}"]), "sglang")
        assert b.root_cause is not None and b.root_cause.exception is None, code


_ACCESS = 'INFO:172.16.18.69:52036- "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error'
_DEAD = "CRITICAL 02-14 08:44:33 launcher.py:101] MQLLMEngine is already dead, terminating server process"


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["", "[rank0]:", "(APIServer pid=1) "]), st.sampled_from([" ", "  "]), st.sampled_from(["INFO", "WARNING", "ERROR"]))
def test_another_formatters_record_with_the_engines_record_glued_after_it_is_two_records(tag: str, gap: str, level: str) -> None:
    access = _ACCESS.replace("INFO:", f"{level}:", 1)
    lines = ["INFO 02-14 08:44:26 engine.py:275] Added request chatcmpl-4fb9.", tag + access + gap + _DEAD]
    a = analyze_bytes(_log(lines), "vllm")
    assert a.state == RunState.CRASHED and a.root_cause is not None
    assert a.root_cause.message == "MQLLMEngine is already dead, terminating server process" and a.root_cause.line == 2
    # the engine's header inside an ordinary record's message is not cut out of it
    quiet = analyze_bytes(_log([lines[0], f"INFO 02-14 08:44:27 engine.py:275] quoted: {_DEAD}"]), "vllm")
    assert quiet.state != RunState.CRASHED


_RETRY = "[info] Connection to RPC socket failed for endpoint aibrix-model-deepseek-coder-7b-kvcache-rpc:9600 with ret = IOError: getaddrinfo() failed for endpoint aibrix-model-deepseek-coder-7b-kvcache-rpc:9600, retrying {n} more times."


@settings(max_examples=20, deadline=None)
@given(st.integers(2, 12), st.sampled_from(["with ret =", "failed, got", "because of"]))
def test_an_exception_named_after_prose_teaches_no_prefix_and_fails_nothing(repeats: int, words: str) -> None:
    head = [
        "INFO 02-17 17:03:44 model_runner.py:1041] Loading model weights took 12.5708 GB",
        "INFO 02-17 17:03:44 vineyard_llm_cache.py:306] VineyardLLMCache from_envs None",
        "INFO 02-17 17:03:44 vineyard_llm_cache.py:306] VineyardLLMCache async update",
    ]
    retries = [_RETRY.format(n=repeats - i).replace("with ret =", words) for i in range(repeats)]
    a = analyze_bytes(_log(head + retries), "vllm")
    assert a.prefix is None or a.prefix.stripped == 0, a.prefix
    assert a.state == RunState.LOADING and a.root_cause is None
    weights = next(s for s in a.stages if s.name == "weights")
    assert weights.status.value == "done" and "12.5708 GB" in weights.detail


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 4), st.integers(2, 6))
def test_spaces_alone_before_engine_lines_are_no_prefix(indent: int, n: int) -> None:
    lines = [" " * indent + f"[rank3]:[E227 16:30:43.52630{i} ProcessGroupNCCL.cpp:1834] [PG ID 2 PG GUID 3 Rank 3] Timeout at NCCL work: 32, last enqueued NCCL work: 32." for i in range(n)]
    a = analyze_bytes(_log(lines), "sglang")
    assert a.prefix is None or a.prefix.stripped == 0, a.prefix
    assert a.root_cause is not None and a.root_cause.message == "Timeout at NCCL work: 32"


# -- batch 23's classes ----------------------------------------------------------------------------------
# - UCX's signal handler ("Caught signal 11 (Segmentation fault: ...)") and its backtrace frames
#   ("14 0x0000000000004493 ???()  /usr/lib/.../libffi.so.8:0"), its header above the window, are a native crash;
# - c10's native frames ("frame #23: f + 0xd0 (0x5578c75d3f50 in lib)") alone are a C++ exception's report;
# - C++'s "Exception raised from X at f.cpp:N" says where its record right above failed: said with that record.

_UCX = [
    " 14 0x0000000000004493 ???()  /usr/lib/x86_64-linux-gnu/libffi.so.8:0",
    " 15 0x000000000000a3e9 ???()  /usr/lib/python3.10/lib-dynload/_ctypes.cpython-310-x86_64-linux-gnu.so:0",
    " 17 0x0000000000150a7b _PyObject_MakeTpCall()  ???:0",
]


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["", "(RayWorkerWrapper pid=376235, ip=10.10.10.61) "]), st.integers(1, len(_UCX)), st.booleans())
def test_ucx_backtrace_frames_are_a_native_crash_and_its_caught_signal_line_says_which(tag: str, n: int, header: bool) -> None:
    caught = "[1714000000.123456] [node-61:376235:0]  debug.c:1349 UCX  ERROR   Caught signal 11 (Segmentation fault: address not mapped to object at address (nil))"
    lines = [*([caught, "==== backtrace (tid: 376235) ===="] if header else []), *_UCX[:n]]
    a = analyze_bytes(_log([tag + ln for ln in lines]), "vllm")
    assert a.state == RunState.CRASHED and a.root_cause is not None and a.root_cause.exception is None
    assert a.root_cause.evidence == "no traceback: a native crash report"
    want = "Caught signal 11 (Segmentation fault: address not mapped to object at address (nil))" if header else _UCX[0].strip()
    assert a.root_cause.message == want
    # the same numbers and names without the address column are no backtrace
    plain = analyze_bytes(_log(["INFO 05-01 10:00:00 [core.py:1] step 14 done()  ok:0"]), "vllm")
    assert plain.state != RunState.CRASHED


_C10 = [
    "frame #23: _PyObject_FastCallDictTstate + 0xd0 (0x5578c75d3f50 in sglang::scheduler_TP0)",
    "frame #24: _PyObject_Call_Prepend + 0x69 (0x5578c75e5ba9 in sglang::scheduler_TP0)",
]
_RECORD = "[rank1]:[W1119 17:59:26.271588084 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=61, addr=[localhost]:33850, remote=[localhost]:30005): Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?"
_RAISED = "Exception raised from recvBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:682 (most recent call first):"


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["", "(WorkerDict pid=559716) "]), st.integers(0, 2), st.integers(1, len(_C10)))
def test_a_cpp_exceptions_report_says_its_record_then_where_then_its_frames(tag: str, shown: int, frames: int) -> None:
    """``shown``: 0 the frames alone, 1 from "Exception raised from", 2 from the record above it."""
    lines = [_RECORD, _RAISED][2 - shown :] + _C10[:frames]
    a = analyze_bytes(_log([tag + ln for ln in lines]), "sglang")
    assert a.state == RunState.CRASHED and a.root_cause is not None and a.root_cause.exception is None
    if shown == 2:
        assert a.root_cause.message.startswith("recvValue failed on SocketImpl(") and a.root_cause.message.endswith("(Exception raised from recvBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:682)")
    elif shown == 1:
        assert a.root_cause.message == "Exception raised from recvBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:682"
    else:
        assert a.root_cause.message == _C10[0]
    # a warning record further up is not this exception's
    far = analyze_bytes(_log([tag + ln for ln in [_RECORD, "INFO 11-19 17:59:27 other line", _RAISED, *_C10[:frames]]]), "sglang")
    assert far.root_cause is not None and far.root_cause.message.startswith("Exception raised from")
