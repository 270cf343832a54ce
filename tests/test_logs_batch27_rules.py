"""Issue #34, batch 27's classes, each as a rule over a family of inputs (the lines are real: fresh-27's
vLLM and SGLang logs, sources on their line 1, recombined):

- a tool parser's failure is logged with its traceback and answered without tool calls ("Error in
  extracting tool call from response.", "Error trying to handle streaming tool call."): the server goes
  on serving; the same traceback under another record is a failure;
- SGLang's detokenizer wakes in its event loop only for a running batch's tokens, and the 2024
  controller's TP worker ran a decode batch in ``forward_decode_batch``: a traceback through either,
  its top cut by the window, was serving; one through the detokenizer's start-up was not;
- syslog's octal escape of ESC ("#033[1;36m(VllmWorker rank=2 pid=7)#033[0;0m") is an escape, like the ESC
  byte and a terminal's caret notation;
- a stamp alone is the engine's blank line behind a capture stamp (it ends an exception's message), never a
  platform's own line;
- a CSV export's field separator ('1756144012376,"') ends a capture prefix as a space does.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.engines.logs.files import analyze_bytes
from servelab.engines.runs.state import RunState

_PARSER = "/opt/conda/envs/vllm/lib/python3.10/site-packages/vllm/entrypoints/openai/tool_parsers/hermes_tool_parser.py"
_SERVED = '(APIServer pid=85343) INFO:     127.0.0.1:50001 - "POST /v1/chat/completions HTTP/1.1" 200 OK'


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["Error in extracting tool call from response.", "Error trying to handle streaming tool call.",
                        "EngineCore encountered a fatal error."]),
       st.sampled_from([None, "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)", "IndexError: list index out of range"]),
       st.integers(0, 2), st.booleans())
def test_a_tool_parsers_logged_failure_is_one_requests_and_the_server_goes_on(record: str, end: str | None, served_after: int, prefix: bool) -> None:
    head = "(APIServer pid=85343) ERROR 10-09 09:39:54 [hermes_tool_parser.py:157] "
    lines = [_SERVED, f"{head}{record}", f"{head}Traceback (most recent call last):",
             f'{head}  File "{_PARSER}", line 140, in extract_tool_calls', f"{head}    raw_function_calls = ["]
    if end is not None:
        lines.append(f"{head}{end}")
    lines += [_SERVED] * served_after
    a = analyze_bytes("".join(f"{'vllm-0 | ' if prefix else ''}{line}\n" for line in lines).encode(), "vllm")
    handled = "tool call" in record
    assert a.was_ready is True
    assert (a.state is RunState.READY and a.root_cause is None) is handled, (a.state, a.root_cause)
    if not handled:
        assert a.state is RunState.CRASHED and a.root_cause is not None


_SRT = "/opt/sglang/python/sglang/srt"
_DETOK_LOOP = [f'  File "{_SRT}/managers/detokenizer_manager.py", line 275, in run_detokenizer_process', "    manager.event_loop()",
               f'  File "{_SRT}/managers/detokenizer_manager.py", line 110, in event_loop', "    output = self._request_dispatcher(recv_obj)"]
_DETOK_INIT = [f'  File "{_SRT}/managers/detokenizer_manager.py", line 270, in run_detokenizer_process',
               "    manager = DetokenizerManager(server_args, port_args)", f'  File "{_SRT}/managers/detokenizer_manager.py", line 80, in __init__',
               "    self.tokenizer = get_tokenizer("]
_DECODE = [f'  File "{_SRT}/managers/controller_single.py", line 103, in loop_for_forward', "    out_pyobjs = self.tp_server.exposed_step(recv_reqs)",
           f'  File "{_SRT}/managers/tp_worker.py", line 612, in forward_decode_batch', "    next_token_ids = batch.sample(output.next_token_logits)"]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["loop", "init", "decode"]), st.sampled_from(["", "[2025-08-15 14:25:48] DetokenizerManager hit an exception: "]),
       st.sampled_from([None, "KeyError: 'rid-7'", "RuntimeError: CUDA error: an illegal memory access was encountered"]))
def test_the_detokenizers_loop_and_the_old_decode_step_run_only_while_serving(where: str, header: str, end: str | None) -> None:
    frames = {"loop": _DETOK_LOOP, "init": _DETOK_INIT, "decode": _DECODE}[where]
    lines = [f"{header}Traceback (most recent call last):", *frames, *([end] if end else [])]
    a = analyze_bytes("".join(f"{line}\n" for line in lines).encode(), "sglang")
    assert a.state is RunState.CRASHED and a.root_cause is not None, (a.state, a.root_cause)
    assert a.was_ready is (where != "init"), (where, a.was_ready)


# Colour codes around a process tag in syslog's octal escape ("#033[1;36m(VllmWorker rank=2 pid=7)#033[0;0m",
# rsyslog's escaping of control characters) are escapes, as ESC bytes and a terminal's caret notation are.
_TB = ['  File "/opt/pytorch/lib/python3.12/site-packages/torch/_ops.py", line 1357, in load_library', "    ctypes.CDLL(path)",
       '  File "/usr/local/lib/python3.12/ctypes/__init__.py", line 379, in __init__', "    self._handle = _dlopen(self._name, mode)",
       "OSError: /root/.cache/torch_extensions/py312_cu124/xgrammar/xgrammar.so: cannot open shared object file: No such file or directory"]


def _facts(data: bytes) -> tuple[object, ...]:
    a = analyze_bytes(data, "vllm")
    rc = a.root_cause
    return a.state, a.was_ready, None if rc is None else (rc.exception, rc.message, rc.evidence)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["#033", "\x1b", "^["]), st.integers(1, 3), st.integers(2, 400_000), st.integers(0, 4), st.booleans())
def test_syslogs_octal_escape_is_an_escape_like_esc_and_caret_notation(esc: str, rank: int, pid: int, start: int, syslog: bool) -> None:
    lead = f"Apr  3 17:38:57 langmodel52 langmodel[{pid}]: " if syslog else ""
    tag = f"(VllmWorker rank={rank} pid={pid})"
    lines = ["Traceback (most recent call last):", *_TB][start:]
    plain = "".join(f"{lead}{tag} {line}\n" for line in lines) + f"{lead}{tag}\n"
    coloured = "".join(f"{lead}{esc}[1;36m{tag}{esc}[0;0m {line}\n" for line in lines) + f"{lead}{esc}[1;36m{tag}{esc}[0;0m\n"
    want = _facts(plain.encode())
    assert want[0] is RunState.CRASHED and want[2] is not None and want[2][1].endswith("No such file or directory"), want
    assert _facts(coloured.encode()) == want


# A blank line behind a capture stamp (the stamp alone) is the engine's blank line: it ends an exception's
# message as the bare blank line does, never dropped as a platform's own line.
@settings(max_examples=30, deadline=None)
@given(st.integers(1, 3), st.sampled_from(["2025-01-02T10:00:00.123456789Z ", "2025-01-02 10:00:00.123 ", "Jan  2 10:00:00 "]))
def test_a_blank_line_behind_a_stamp_ends_a_message_as_a_bare_blank_line_does(blanks: int, stamp: str) -> None:
    lines = ['  File "/venv/lib/python3.10/site-packages/triton/backends/compiler.py", line 186, in from_dict',
             "    attrs_descriptor.arg_properties[prop_name] = list(map(tuple, param_ids))",
             "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:", "TypeError: 'int' object is not iterable",
             *[""] * blanks, "You can suppress this exception and fall back to eager by setting:", "    import torch._dynamo",
             "    torch._dynamo.config.suppress_errors = True"]
    bare = _facts("".join(f"{line}\n" for line in lines).encode())
    assert bare[2] is not None and "suppress" not in bare[2][1], bare
    assert _facts("".join(f"{stamp}{line}\n" for line in lines).encode()) == bare


# A CSV export's field separator ends a capture prefix as a space does ('1756144012376,"' right before the
# engine's line, the line quoted or not): the lines read as the bare log's.
@settings(max_examples=20, deadline=None)
@given(st.integers(10**12, 2 * 10**12), st.sampled_from(["all", "none", "alternate", "pairs"]))
def test_a_csv_exports_separator_ends_a_prefix(millis: int, form: str) -> None:
    # (each form on two lines at least: a prefix's shape is learnt from two)
    quoted = [{"all": True, "none": False, "alternate": i % 2 == 0, "pairs": i // 2 % 2 == 0}[form] for i in range(len(_TB) + 1)]
    tag = "(EngineCore_0 pid=75) ERROR 08-25 10:46:52 [core.py:700] "
    lines = [f"{tag}{line}" for line in ["Traceback (most recent call last):", *_TB]]
    bare = _facts("".join(f"{line}\n" for line in lines).encode())
    exported = "".join(f'{millis},"{line}"\n' if q else f"{millis},{line}\n" for line, q in zip(lines, quoted))
    a = analyze_bytes(exported.encode(), "vllm")
    assert a.prefix is not None and a.prefix.stripped == len(lines), a.prefix
    assert _facts(exported.encode())[:2] == bare[:2] and bare[2] is not None
    rc = a.root_cause
    assert rc is not None and rc.exception == bare[2][0] and rc.message.startswith(str(bare[2][1])), (rc, bare)
