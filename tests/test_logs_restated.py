"""Issue #34, batch 15's classes: what an exception chain, a cut traceback, a C++ record and a list say.

- an exception whose message is only a quoted key, handled and raised again with a sentence naming that key,
  is said by the sentence; a wrapper never replaces it, and a later exception that does not name it is not it;
- a traceback cut before its exception line is said with the wrapper record it was logged with and with its
  last frame's own code line;
- a C++ runtime's error record that a wait ran out is fatal evidence;
- a list item's bullet ("- ImportError: ...") is never a line prefix, bare or behind a capture tool's, and a
  heading behind a stamp ("2026-01-05T10:00:00Z GPU Info:") is the message's text, not a platform's line.

The lines are real (fresh-15 logs, sources on their line 1), recombined.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab.engines.logs.files import analyze_bytes
from servelab.engines.logs.rootcause import TB_START
from servelab.engines.runs.state import RunState

_HANDLED = "During handling of the above exception, another exception occurred:"
_CAUSE = "The above exception was the direct cause of the following exception:"


def _chain(*parts: tuple[str, str, str]) -> bytes:
    """Tracebacks chained by the separators given: (separator, frame's code line, exception line)."""
    out: list[str] = []
    for i, (sep, code, exc) in enumerate(parts):
        if i:
            out += ["", sep, ""]
        out += [TB_START + ":", f'  File "/usr/lib/python3.12/site-packages/aiter/jit/utils/chip_info.py", line {60 + i}, in get_gfx', f"    {code}", exc]
    return ("\n".join(out) + "\n").encode()


_KEYS = st.text(alphabet=st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789_-"), min_size=2, max_size=20)


@given(_KEYS, st.sampled_from([_HANDLED, _CAUSE]), st.sampled_from(["KeyError", "ValueError", "RuntimeError"]))
def test_a_bare_key_raised_again_in_a_sentence_is_said_by_the_sentence(key: str, sep: str, outer: str) -> None:
    sentence = f"Unknown GPU architecture: {key}. Supported architectures: ['gfx90a', 'gfx942']"
    rc = analyze_bytes(_chain((sep, "return gfx_mapping[arch]", f"KeyError: '{key}'"), (sep, "raise " + outer + "(", f"{outer}: {sentence}")), "vllm").root_cause
    assert rc is not None and rc.exception == outer and rc.message == sentence


@given(_KEYS.filter(lambda k: k not in {"NoneType", "object", "is", "not", "subscriptable"}))
def test_a_later_exception_that_does_not_name_the_key_leaves_the_key(key: str) -> None:
    # (a key is named only as a whole word: "no" is not named by "NoneType", nor "ob" by "object")
    rc = analyze_bytes(_chain((_HANDLED, "return table[name]", f"KeyError: '{key}'"), (_HANDLED, "raise TypeError(", "TypeError: 'NoneType' object is not subscriptable")), "vllm").root_cause
    assert rc is not None and rc.exception == "KeyError" and rc.message == f"'{key}'"


def test_a_wrapper_naming_the_key_never_replaces_it() -> None:
    wrapper = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'gfx1101': 1}"
    rc = analyze_bytes(_chain((_CAUSE, "return gfx_mapping[arch]", "KeyError: 'gfx1101'"), (_CAUSE, "raise RuntimeError(", wrapper)), "vllm").root_cause
    assert rc is not None and rc.exception == "KeyError" and rc.message == "'gfx1101'"


def test_a_message_that_is_a_sentence_is_never_restated() -> None:
    first = "ValueError: max_model_len 'x' is larger than the model's"
    rc = analyze_bytes(_chain((_HANDLED, "raise ValueError(", first), (_HANDLED, "raise RuntimeError(", "RuntimeError: bad max_model_len 'x'")), "vllm").root_cause
    assert rc is not None and rc.exception == "ValueError"


_CUT = [
    "ERROR 09-23 01:13:49 [core.py:396] EngineCore failed to start.",
    "ERROR 09-23 01:13:49 [core.py:396] Traceback (most recent call last):",
    'ERROR 09-23 01:13:49 [core.py:396]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 387, in run_engine_core',
    "ERROR 09-23 01:13:49 [core.py:396]     engine_core = EngineCoreProc(*args, **kwargs)",
    "ERROR 09-23 01:13:49 [core.py:396]                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    'ERROR 09-23 01:13:49 [core.py:396]   File "/usr/local/lib/python3.12/dist-packages/vllm/executor/uniproc_executor.py", line 46, in _init_executor',
]


@pytest.mark.parametrize("carets", [False, True])
def test_a_cut_traceback_says_its_wrapper_record_and_its_last_code_line(carets: bool) -> None:
    lines = [*_CUT, "ERROR 09-23 01:13:49 [core.py:396]     self.collective_rpc(\"init_device\")"]
    if carets:
        lines.append("ERROR 09-23 01:13:49 [core.py:396]     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^")
    rc = analyze_bytes(("\n".join(lines) + "\n").encode(), "vllm").root_cause
    assert rc is not None and rc.exception is None
    assert rc.message.startswith("EngineCore failed to start. The traceback is cut off before its exception line")
    assert 'at `self.collective_rpc("init_device")`' in rc.message


def test_a_cut_traceback_ending_on_a_file_line_names_no_code() -> None:
    rc = analyze_bytes(("\n".join(_CUT) + "\n").encode(), "vllm").root_cause
    assert rc is not None and rc.message.endswith("(last frame: executor/uniproc_executor.py:46 in _init_executor)")


_C10D = "[E1226 15:44:09.437224181 socket.cpp:1011] [c10d] The client socket has timed out after 600000ms while trying to connect to (sws-8h100grid-05, 8000)."


@pytest.mark.parametrize("record", [_C10D, _C10D.replace("[E1226 15:44:09.437224181 ", "[E "), _C10D.replace("600000ms", "600 seconds")])
def test_a_cpp_error_record_that_a_wait_timed_out_is_fatal(record: str) -> None:
    frames = ["frame #56: __libc_start_main + 0x85 (0x7f5b7dc41305 in /lib/x86_64-linux-gnu/libc.so.6)", "frame #57: _start + 0x21 (0x6297b1 in sglang::scheduler)", ""]
    a = analyze_bytes(("\n".join([*frames, record]) + "\n").encode(), "sglang")
    assert a.state == RunState.CRASHED and a.root_cause is not None
    assert "The client socket has timed out after 600" in a.root_cause.message


def test_a_cpp_record_that_only_failed_to_connect_once_is_no_cause() -> None:
    retry = "[W1226 15:34:09.437224181 socket.cpp:752] [c10d] The client socket has failed to connect to [head]:8000 (errno: 111 - Connection refused)."
    a = analyze_bytes((retry + "\n").encode(), "sglang")
    assert a.state != RunState.CRASHED


_LIST = [
    "ImportError: ",
    "[sgl_kernel] CRITICAL: Could not load any common_ops library!",
    "Attempted locations:",
    "1. Architecture-specific pattern: /usr/local/lib/python3.10/dist-packages/sgl_kernel/sm100/common_ops.*",
    "GPU Info:",
    "- Compute capability: 86",
    "Error details from previous import attempts:",
    "- ImportError: /usr/local/lib/python3.10/dist-packages/sgl_kernel/sm100/common_ops.abi3.so: undefined symbol: _ZNK3c10",
    "- ModuleNotFoundError: No module named 'common_ops'",
]


@pytest.mark.parametrize("bullet", ["- ", "* ", "• ", "2. ", "3) "])
@pytest.mark.parametrize("outer", ["", "sglang-1  | ", "[pod/sglang-0/server] ", "2026-01-05T10:00:00.123456789Z "])
def test_a_list_bullet_before_an_exception_is_never_a_prefix(bullet: str, outer: str) -> None:
    lines = [ln.replace("- ", bullet, 1) if ln.startswith("- ") else ln for ln in _LIST]
    a = analyze_bytes("".join(f"{outer}{ln}\n" for ln in lines).encode(), "sglang")
    assert a.prefix is None or all(e == outer for e in a.prefix.examples), a.prefix
    assert a.root_cause is not None and a.root_cause.exception == "ImportError"
    assert "Attempted locations:" in a.root_cause.message and "GPU Info:" in a.root_cause.message


# -- batch 16's classes -------------------------------------------------------------------------------------

_FAULT = [
    '  File "/usr/lib/python3.11/multiprocessing/spawn.py", line 120 in spawn_main',
    '  File "<string>", line 1 in <module>',
    "Fatal Python error: Segmentation fault",
    "",
    "Current thread 0x00007f4858f86740 (most recent call first):",
    '  File "/usr/lib/python3.11/site-packages/sglang/srt/distributed/device_communicators/pynccl_wrapper.py", line 351 in ncclCommInitRank',
    '  File "/usr/lib/python3.11/site-packages/sglang/srt/distributed/device_communicators/pynccl.py", line 108 in __init__',
]


@pytest.mark.parametrize("start", range(3))
def test_faulthandlers_frames_have_no_code_line_and_the_native_crash_is_the_cause(start: int) -> None:
    a = analyze_bytes(("\n".join(_FAULT[start:]) + "\n").encode(), "sglang")
    assert a.state == RunState.CRASHED and a.root_cause is not None
    assert a.root_cause.message.startswith("Fatal Python error: Segmentation fault") and a.root_cause.exception is None


def test_a_python_frames_next_line_is_still_its_code() -> None:
    tb = [TB_START + ":", '  File "/x/sglang/srt/model_executor/cuda_graph_runner.py", line 309, in __init__', "    raise Exception("]
    rc = analyze_bytes(("\n".join(tb) + "\n").encode(), "sglang").root_cause
    assert rc is not None and rc.message.endswith("at `raise Exception(`)")


@pytest.mark.parametrize("prefix", ["", "(APIServer pid=27876) "])
def test_vllms_supported_tasks_line_ends_the_start_up_stages(prefix: str) -> None:
    lines = [
        f"{prefix}INFO 08-18 14:15:03 [model.py:644] Resolved architecture: Qwen3ForCausalLM",
        f"{prefix}INFO 08-18 14:15:04 [api_server.py:592] Supported tasks: ['generate']",
    ]
    a = analyze_bytes(("\n".join(lines) + "\n").encode(), "vllm")
    assert a.state == RunState.LOADING and not a.was_ready
    assert [s.name for s in a.stages if s.status.value == "done"][-1] == "warmup"


_SGLANG_TB = [
    "[2024-10-22 06:31:49 TP0] Capture cuda graph begin. This can take up to several minutes.",
    "[2024-10-22 06:31:49 TP0] Traceback (most recent call last):",
    '  File "/x/sglang/srt/model_executor/cuda_graph_runner.py", line 233, in capture_one_batch_size',
    "    self.model_runner.attn_backend.init_forward_metadata_capture_cuda_graph(",
    '  File "/x/sglang/srt/layers/attention/flashinfer_backend.py", line 452, in call_begin_forward',
    "    wrapper.begin_forward(",
]


@pytest.mark.parametrize("end", ["", "RuntimeError: CUDA error: an illegal memory access was encountered"])
def test_a_stamped_traceback_record_goes_on_with_its_unprefixed_frames(end: str) -> None:
    rc = analyze_bytes(("\n".join([*_SGLANG_TB, end]) + "\n").encode(), "sglang").root_cause
    assert rc is not None and rc.process == "TP0" and rc.where == "attention/flashinfer_backend.py:452 in call_begin_forward"
    if end:
        assert rc.exception == "RuntimeError" and "illegal memory access" in rc.message
    else:
        assert rc.message.endswith("at `wrapper.begin_forward(`)")


# -- batch 17's classes -------------------------------------------------------------------------------------

@pytest.mark.parametrize("blocks", ["# GPU blocks: 11753, # CPU blocks: 4369", "# cuda blocks: 2048"])
def test_v0s_first_lines_are_its_config_and_kv_cache_stages(blocks: str) -> None:
    lines = [
        "INFO 01-04 11:10:36 llm_engine.py:70] Initializing an LLM engine with config: model='/data01/Yi-34b-Chat', tokenizer='/data01/Yi-34b-Chat'",
        f"INFO 01-04 11:11:00 llm_engine.py:196] {blocks}",
    ]
    a = analyze_bytes(("\n".join(lines) + "\n").encode(), "vllm")
    assert a.state == RunState.LOADING
    assert {s.name: s.status.value for s in a.stages}["config"] == "done"
    assert {s.name: s.status.value for s in a.stages}["kv_cache"] in ("running", "done")


def test_a_cut_tracebacks_answer_starts_at_the_wrapper_record_it_quotes() -> None:
    lines = [_CUT[0], *_CUT[1:]]
    rc = analyze_bytes(("\n".join(["INFO 09-23 01:13:40 [core.py:70] Initializing a V1 LLM engine", *lines]) + "\n").encode(), "vllm").root_cause
    assert rc is not None and rc.line == 2 and rc.message.startswith("EngineCore failed to start.")


# -- batch 18's classes -------------------------------------------------------------------------------------

_WORKER_CUT = [
    "(Worker pid=509) ERROR 04-13 19:52:24 [multiproc_executor.py:800] WorkerProc failed to start.",
    "(Worker pid=509) ERROR 04-13 19:52:24 [multiproc_executor.py:800] Traceback (most recent call last):",
    '(Worker pid=509) ERROR 04-13 19:52:24 [multiproc_executor.py:800]   File "/usr/lib/python3.12/dist-packages/vllm/v1/executor/multiproc_executor.py", line 771, in worker_main',
    "(Worker pid=509) ERROR 04-13 19:52:24 [multiproc_executor.py:800]     worker = WorkerProc(*args, **kwargs)",
]


@pytest.mark.parametrize("warn", [
    "host-8579zt8:508:508 [0] init.cc:426 NCCL WARN Cuda failure 'operation not supported'",
    "h100-15:139:1092 [7] socket.c:485 NCCL WARN socketStartConnect: Connect to 10.0.0.82<38455> failed : Software caused connection abort",
    "node1:77:77 [3] NCCL WARN Call to ibv_modify_qp failed with error Connection timed out",
])
def test_nccls_own_failure_warning_outranks_a_wrappers_cut_traceback(warn: str) -> None:
    a = analyze_bytes(("\n".join([warn, "host-8579zt8:508:508 [0] NCCL INFO init.cc:1437 -> 1", *_WORKER_CUT]) + "\n").encode(), "vllm")
    assert a.state == RunState.CRASHED and a.root_cause is not None
    assert a.root_cause.message == warn.split("NCCL WARN ", 1)[1] and a.root_cause.exception is None


def test_an_ncclwarn_alone_fails_nothing() -> None:
    a = analyze_bytes(b"h100-15:139:1092 [7] socket.c:485 NCCL WARN socketStartConnect: Connect to 10.0.0.82<38455> failed\n", "sglang")
    assert a.state != RunState.CRASHED


@pytest.mark.parametrize("pipe", ["|", "\\|"])
def test_a_shard_bar_reads_with_its_pipe_escaped_or_not(pipe: str) -> None:
    line = f"(LLMActor pid=619) Loading safetensors checkpoint shards:  53% Completed {pipe} 9/17 [01:00<00:56,  7.04s/it]"
    a = analyze_bytes((line + "\n").encode(), "vllm")
    assert a.state == RunState.LOADING
    weights = next(s for s in a.stages if s.name == "weights")
    assert weights.status.value == "running"


def test_v1s_cudagraph_capture_record_is_the_graph_stage() -> None:
    line = "(Worker_TP1_EP1 pid=43) DEBUG 09-13 16:16:38 [compilation/cuda_graph.py:134] Capturing a cudagraph on (PIECEWISE,BatchDescriptor(num_tokens=2, uniform_decode=False))"
    a = analyze_bytes((line + "\n").encode(), "vllm")
    assert a.state == RunState.LOADING and next(s for s in a.stages if s.name == "cuda_graphs").status.value == "running"


def test_a_cuda_driver_failure_then_dead_children_is_a_crash_named_by_the_driver() -> None:
    lines = ["[torch_memory_saver.cpp] CUresult error  result=1 file=csrc/torch_memory_saver.cpp func=resume line=214"] * 2
    lines += ["Child process unexpectedly failed with an exit code 256. pid=97721"]
    a = analyze_bytes(("\n".join(lines) + "\n").encode(), "sglang")
    assert a.state == RunState.CRASHED and a.root_cause is not None
    assert a.root_cause.message.startswith("CUresult error  result=1")
    alone = analyze_bytes(b"Child process unexpectedly failed with an exit code 256. pid=97721\n", "sglang")
    assert alone.state == RunState.CRASHED and alone.root_cause is not None and "exit code 256" in alone.root_cause.message


def test_a_cpp_error_record_that_failed_with_something_is_fatal() -> None:
    lines = [
        "[rank10]:[E130 18:11:34.707542570 ProcessGroupGloo.cpp:143] Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error",
        "[2025-01-30 18:11:34 TP10] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1773, in run_scheduler_process',
    ]
    rc = analyze_bytes(("\n".join(lines) + "\n").encode(), "sglang").root_cause
    assert rc is not None and rc.message.startswith("Gloo connectFullMesh failed with")
