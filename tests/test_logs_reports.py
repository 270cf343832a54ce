"""Issue #34, batch 13's classes: what a launcher, a C++ runtime or a warning reports.

- a launcher's exception that only reports its child's exit code is evidence of that death;
- a C++ runtime record in PyTorch's older form ("[E ProcessGroupNCCL.cpp:916] ...", no date) is a fatal record;
- a traceback cut before its exception line is said with the warning just above it that names a failure;
- a backend's "[vllm] Failed to start engine: ..." is the statement, tag included;
- the writer's own header outweighs a relaying process's tag when the engine is guessed.

The lines are real (fresh-11 and fresh-13 logs, sources on their line 1).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.engines.logs.files import analyze_bytes, guess_engine
from servelab.engines.logs.rootcause import EVIDENCE_WORDS, TB_START
from servelab.engines.runs.state import RunState

LOGS = Path(__file__).parent / "data" / "logs"

_LAUNCHER_TB = [
    TB_START + ":",
    '  File "/sglang/python/sglang/test/test_utils.py", line 625, in popen_launch_server',
    "    raise Exception(",
]


@pytest.mark.parametrize(
    "report",
    [
        "Exception: Server process exited with code -9. Check server logs for errors.",
        "RuntimeError: Rank 0 scheduler died during initialization (exit code: -3). If exit code is -9 (SIGKILL), a common cause is the OS OOM killer.",
        "RuntimeError: Process ApiServer_0 (PID: 359) died with exit code 1",
    ],
)
def test_a_launchers_exception_reporting_a_childs_exit_code_is_that_death(report: str) -> None:
    a = analyze_bytes(("\n".join([*_LAUNCHER_TB, report]) + "\n").encode(), "sglang")
    rc = a.root_cause
    assert a.state == RunState.CRASHED and rc is not None
    assert rc.exception is None and rc.evidence == EVIDENCE_WORDS["process death"]
    assert report.split(": ", 1)[1].split(".")[0] in rc.message


@pytest.mark.parametrize("code", ["0", "-15", "2"])
def test_a_stop_code_in_a_launchers_exception_is_no_death(code: str) -> None:
    rc = analyze_bytes(("\n".join([*_LAUNCHER_TB, f"Exception: Server process exited with code {code}."]) + "\n").encode(), "sglang").root_cause
    assert rc is not None and rc.exception == "Exception" and rc.evidence == EVIDENCE_WORDS["traceback"]


def test_the_childs_earlier_death_notice_wins_over_the_launchers_report() -> None:
    log = (LOGS / "fresh-13" / "sglang-bench-speculative-sigquit-child-server-exited-code-minus-9-12420.log").read_bytes()
    rc = analyze_bytes(log, "sglang").root_cause
    assert rc is not None and rc.message == "Received sigquit from a child process"


_WATCHDOG = "[Rank 7] NCCL watchdog thread terminated with exception: CUDA error: unknown error"


@pytest.mark.parametrize("stamp", ["[E ProcessGroupNCCL.cpp:916] ", "[E1201 12:14:43.351647859 ProcessGroupNCCL.cpp:916] "])
def test_a_cpp_error_record_with_or_without_its_time_is_a_fatal_record(stamp: str) -> None:
    rc = analyze_bytes(f"(RayWorkerVllm pid=5304) {stamp}{_WATCHDOG}\n".encode(), "vllm").root_cause
    assert rc is not None and "CUDA error: unknown error" in rc.message and rc.evidence == EVIDENCE_WORDS[""]


# -- a warning just above a cut traceback -------------------------------------------------------
_KSERVE = (LOGS / "fresh-13" / "kserve-container-prefix-unspecified-platform-libcuda-cli-parser-traceback-cut-4657.log").read_text().splitlines()
_WARNING = next(i for i, ln in enumerate(_KSERVE) if "WARNING" in ln)


def _cut_cause(lines: list[str]) -> str:
    rc = analyze_bytes(("\n".join(lines) + "\n").encode(), "vllm").root_cause
    assert rc is not None and rc.evidence == EVIDENCE_WORDS["traceback cut"]
    return rc.message


def test_a_cut_traceback_is_said_with_the_warning_above_it_that_names_a_failure() -> None:
    assert "libcuda.so.1: cannot open shared object file" in _cut_cause(_KSERVE)
    # the same warning further up than a record's preface, or without the failure it names: not said
    far = _KSERVE[: _WARNING + 1] + ["kserve-container INFO 09-02 06:44:03 [__init__.py:1] nothing"] * 5 + _KSERVE[_WARNING + 1 :]
    assert "warning" not in _cut_cause(far)
    plain = [ln.split("] ", 1)[0] + "] Using the default backend" if i == _WARNING else ln for i, ln in enumerate(_KSERVE)]
    assert "warning" not in _cut_cause(plain)
    # an info record that says the same is no warning
    info = [ln.replace(" WARNING ", " INFO ") for ln in _KSERVE]
    assert "warning" not in _cut_cause(info)


def test_a_cpp_warning_record_counts_as_a_warning() -> None:
    log = next(LOGS.glob("fresh-*/sglang-h20-2node-c10d-socket-timeout-then-init-distributed-traceback-cut-3398.log")).read_text()
    rc = analyze_bytes(log.encode(), "sglang").root_cause
    assert rc is not None and "timed out after 1800000ms" in rc.message
    assert rc.line == 3  # the answer starts at the warning (the window family cuts above it)


def test_a_backends_failed_to_start_statement_keeps_its_tag_and_names_no_exception() -> None:
    line = 'E1216 02:12:49.624646 179 model.py:248] "[vllm] Failed to start engine: NoneType: None\\n"'
    rc = analyze_bytes(f"{line}\n".encode(), "vllm").root_cause
    assert rc is not None and rc.message == "[vllm] Failed to start engine: NoneType: None" and rc.exception is None


def test_the_writers_header_outweighs_a_relaying_processs_tag() -> None:
    log = (LOGS / "fresh-13" / "openclaw-rl-sglangengine-ray-decode-generate-200-health-44.log").read_bytes()
    relayed = log.replace(b"\n(SGLangEngine", b"\n(APIServer pid=7) (SGLangEngine")
    assert relayed.count(b"(APIServer pid=") > 5
    assert guess_engine(log) == guess_engine(relayed) == "sglang"
    # and a vLLM log relayed by anything stays vLLM's
    vllm = (LOGS / "fresh-12" / "llm-d-cuda-dev-triple-tag-workerproc-importerror-cdiv-663.log").read_bytes()
    assert guess_engine(vllm) == "vllm"


# -- batch 14: a runtime's fatal words in other shapes ------------------------------------------
_ROCM = "Memory access fault by GPU node-1 (Agent handle: 0x3d1bda20) on address 0x7fa18d83f000. Reason: Page not present or supervisor privilege."
_CUT = ["(APIServer pid=562) Traceback (most recent call last):", '(APIServer pid=562)   File "/usr/local/bin/vllm", line 33, in <module>']


@pytest.mark.parametrize("before", [True, False])
def test_rocms_gpu_memory_access_fault_is_a_native_crash_above_a_cut_traceback(before: bool) -> None:
    lines = [_ROCM, *_CUT] if before else [*_CUT, _ROCM]
    rc = analyze_bytes(("\n".join(lines) + "\n").encode(), "vllm").root_cause
    assert rc is not None and rc.message.startswith("Memory access fault by GPU node-1") and rc.evidence == EVIDENCE_WORDS["native crash"]


_WATCHDOG_TIMEOUT = "[rank6]:[E207 01:29:36.730311765 ProcessGroupNCCL.cpp:616] [Rank 6] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600050 milliseconds before timing out."


@pytest.mark.parametrize("width", [None, 166, 140, 120, 116])
def test_a_watchdog_timeout_wrapped_by_a_terminal_is_still_the_cause(width: int | None) -> None:
    record = _WATCHDOG_TIMEOUT if width is None else "\n".join(_WATCHDOG_TIMEOUT[i : i + width] for i in range(0, len(_WATCHDOG_TIMEOUT), width))
    a = analyze_bytes(f"[2025-02-07 01:19:40 TP0] Load weight end. type=DeepseekV3ForCausalLM\n{record}\n".encode(), "sglang")
    assert a.state == RunState.CRASHED and a.root_cause is not None
    assert a.root_cause.message.startswith("Watchdog caught collective operation timeout")
    if width is None or width > 140:
        assert "OpType=ALLREDUCE" in a.root_cause.message


def test_a_gaudi_builds_graph_warm_up_is_a_stage_with_its_progress() -> None:
    log = (LOGS / "fresh-14" / "habana-vllm-fork-gaudi3-405b-fp8-hpu-decode-warmup-in-progress-1194.log").read_bytes()
    a = analyze_bytes(log, "vllm")
    st = a.stage("cuda_graphs")
    assert a.state == RunState.LOADING and st.status == "running" and st.progress is not None
    assert (st.progress.done, st.progress.total) == (204, 416)
