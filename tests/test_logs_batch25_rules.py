"""Issue #34, batch 25's classes, each as a rule over a family of inputs (the lines are real: fresh-25's
llm-d and verl logs, sources on their line 1, recombined):

- a traceback cut before its exception line, logged with a wrapper's record ("EngineCore failed to
  start."), right after an error record of another call site of the same process ("[nixl_connector.py:343]
  NIXL is not available"): that record says what the cut traceback does not, and the answer starts at it.
  An error record of another process, one more than four lines above the wrapper's, or of the wrapper's
  own call site is not said;
- an indented line behind a capture stamp ("2025-06-24T08:26:09Z         pid: 122894", a field of Ray's
  ActorDiedError) is the engine's text, never a platform's stamp-and-names line (those name their fields
  within three spaces of the stamp): kept in the exception's message as the bare log keeps it.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.engines.logs.analysis import EVIDENCE_WORDS
from servelab.engines.logs.files import analyze_bytes
from servelab.engines.runs.state import RunState

_SAID = st.sampled_from(["NIXL is not available", "Failed to register memory region with UCX", "Could not find a valid KV connector"])
_HEAD = "ERROR 08-03 11:35:28"
_TB = [
    "Traceback (most recent call last):",
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 510, in run_engine_core',
    "    engine_core = EngineCoreProc(*args, **kwargs)",
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 394, in __init__',
    "    super().__init__(vllm_config, executor_class, log_stats,",
]


def _log(said: str, tag: str, prefix: str, other_proc: bool, between: int, said_tag: str) -> tuple[bytes, int]:
    proc = "(EngineCore_DP0 pid=72) " if tag else ""
    said_proc = "(APIServer pid=1) " if other_proc else proc
    lines = ["INFO 08-03 11:35:20 [core.py:70] Initializing a V1 LLM engine (v0.10.0) with config: model='m'",
             f"{said_proc}{_HEAD} [{said_tag}] {said}"]
    lines += [f"{proc}INFO 08-03 11:35:28 [loader.py:{i}] still setting up" for i in range(between)]
    lines += [f"{proc}{_HEAD} [core.py:519] EngineCore failed to start."]
    lines += [f"{proc}{_HEAD} [core.py:519] {t}" for t in _TB]
    return "".join(f"{prefix}{line}\n" for line in lines).encode(), 2


@settings(max_examples=40, deadline=None)
@given(_SAID, st.booleans(), st.sampled_from(["", "2025-08-03T11:35:28.409790786Z stdout F ", "vllm-0 | "]), st.integers(0, 6),
       st.sampled_from(["nixl_connector.py:343", "core.py:519"]), st.booleans())
def test_an_error_record_right_above_a_cut_tracebacks_wrapper_is_said_with_it(said: str, tag: bool, prefix: str, between: int,
                                                                                said_tag: str, other_proc: bool) -> None:
    data, at = _log(said, "tag" if tag else "", prefix, other_proc and tag, between, said_tag)
    a = analyze_bytes(data, "vllm")
    rc = a.root_cause
    assert a.state is RunState.CRASHED and rc is not None and rc.evidence == EVIDENCE_WORDS["traceback cut"], (a.state, rc)
    assert rc.message.startswith("EngineCore failed to start. The traceback is cut off before its exception line"), rc.message
    # said when it is another call site of the same process, and the wrapper's record follows within a few
    # lines (four, other records between or not: the same reach as a failing warning's)
    near = between <= 3 and said_tag != "core.py:519" and not (other_proc and tag)
    assert (said in rc.message) is near, (rc.message, between, said_tag, other_proc)
    assert rc.line == (at if near else at + 1 + between), rc.line


# An exception's indented fields behind a capture stamp (Ray's ActorDiedError: "        pid: 122894") are the
# engine's text, never a platform's own stamp-and-names line: the message keeps them, as the bare log's does.
_FIELDS = st.lists(st.tuples(st.sampled_from(["actor_id", "pid", "ip", "namespace", "node_id", "job_id"]),
                             st.from_regex(r"[0-9a-f]{6,32}|\d{2,7}|10\.\d{1,3}\.\d{1,3}\.\d{1,3}", fullmatch=True)),
                   min_size=1, max_size=5, unique_by=lambda kv: kv[0])


@settings(max_examples=40, deadline=None)
@given(_FIELDS, st.integers(4, 12), st.sampled_from(["2025-06-24T08:26:09.120774352Z ", "2025-06-24 08:26:09.120 ", "Jun 24 08:26:09 "]),
       st.booleans())
def test_indented_fields_behind_a_stamp_stay_the_messages_and_platform_lines_still_go(fields: list[tuple[str, str]], indent: int, stamp: str,
                                                                                        platform: bool) -> None:
    body = [
        "Traceback (most recent call last):",
        '  File "/home/u/verl/verl/single_controller/ray/base.py", line 51, in __call__',
        "    output = ray.get(output)",
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
        *(f"{' ' * indent}{k}: {v}" for k, v in fields),
        "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR",
    ]
    bare = analyze_bytes("".join(f"{line}\n" for line in body).encode(), "vllm").root_cause
    lines = [f"{stamp}{line}" for line in body]
    if platform:  # a platform's own line between (its stamp and two names): dropped whole
        lines.insert(1, f"{stamp.strip()} vllm-0 main")
    got = analyze_bytes("".join(f"{line}\n" for line in lines).encode(), "vllm")
    assert bare is not None and got.root_cause is not None
    assert all(f"{k}: {v}" in got.root_cause.message for k, v in fields), got.root_cause.message
    assert got.root_cause.message == bare.message and got.root_cause.exception == bare.exception
