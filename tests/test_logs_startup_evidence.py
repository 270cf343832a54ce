"""Issue #34, batch 12's classes: a warm-up's own batches are not serving, a traceback whose top the
window cuts still ends in its exception line, and a node's log without rank 0 still shows its stages.

The lines are real: the fresh-12 logs, and an SGLang launch quoted in a public repository's test
(a podman arbiter's healthy launch log: uvicorn up, /health 503 while it warms up, the warm-up's
prefill batch and POST /generate, then the ready line).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.engines.adapters.sglang import GRAMMAR as SGLANG
from servelab.engines.logs.analyzer import LogAnalyzer
from servelab.engines.logs.files import analyze_bytes
from servelab.engines.logs.rootcause import EVIDENCE_WORDS
from servelab.engines.runs.state import RunState

FRESH = Path(__file__).parent / "data" / "logs" / "fresh-12"

#: SGLang's healthy launch, line by line (the ready line last).
LAUNCH = [
    "[2026-07-27 08:54:35] INFO:     Uvicorn running on http://0.0.0.0:11434 (Press CTRL+C to quit)",
    '[2026-07-27 08:54:36] INFO:     127.0.0.1:58294 - "GET /model_info HTTP/1.1" 200 OK',
    '[2026-07-27 08:54:36] INFO:     10.89.0.114:37694 - "GET /health HTTP/1.1" 503 Service Unavailable',
    "[2026-07-27 08:54:43] Prefill batch, #new-seq: 1, #new-token: 6, #cached-token: 0, full token usage: 0.00",
    '[2026-07-27 08:54:44] INFO:     127.0.0.1:58310 - "POST /generate HTTP/1.1" 200 OK',
    "[2026-07-27 08:54:44] The server is fired up and ready to roll!",
]
#: What opens SGLang's warm-up stage (7547's uvicorn lines and the launch's).
OPENERS = ["[2025-06-27 19:02:10] INFO:     Started server process [2122]", LAUNCH[0]]
PREFILL = LAUNCH[3]


def _sglang(lines: list[str]) -> RunState:
    return analyze_bytes(("\n".join(lines) + "\n").encode(), "sglang").state


@pytest.mark.parametrize("opener", OPENERS)
def test_a_prefill_batch_inside_the_warm_up_is_the_warm_ups_own(opener: str) -> None:
    a = analyze_bytes(f"{opener}\n{PREFILL}\n".encode(), "sglang")
    assert not a.was_ready and a.state != RunState.READY
    # the same batch after the ready line, or with no warm-up in view, is serving
    assert analyze_bytes(f"{opener}\n{LAUNCH[-1]}\n{PREFILL}\n".encode(), "sglang").was_ready
    assert analyze_bytes(f"{PREFILL}\n".encode(), "sglang").was_ready


@pytest.mark.parametrize("cut", range(1, len(LAUNCH) + 1))
def test_the_launch_is_ready_from_its_first_answered_request_or_its_ready_line(cut: int) -> None:
    """Every cut of the healthy launch: ready once an answered request (the HTTP server answered) or
    the ready line is in view, never from the warm-up's prefill batch alone."""
    window = LAUNCH[:cut]
    ready = any("200 OK" in ln or "ready to roll" in ln for ln in window)
    assert (_sglang(window) == RunState.READY) is ready, window[-1]


def test_a_crash_in_the_warm_ups_batch_is_a_crash_at_start_up() -> None:
    log = (FRESH / "sglang-warmup-prefill-scheduler-exception-traceback-cut-7547.log").read_text()
    a = analyze_bytes(log.encode(), "sglang")
    assert a.state == RunState.CRASHED and not a.was_ready
    # without the warm-up's opening lines the same event-loop crash reads as one while serving
    bare = "".join(ln for ln in log.splitlines(keepends=True) if "INFO:     " not in ln)
    assert analyze_bytes(bare.encode(), "sglang").was_ready


def test_batches_before_a_failed_warm_up_were_its_own() -> None:
    """fresh-11's 16855: the excerpt starts at a prefill batch, then the warm-up says it failed."""
    log = next(FRESH.parent.glob("fresh-*/sglang-warmup-502-assertionerror-initialization-failed-chinese-killed-16855.log")).read_bytes()
    a = analyze_bytes(log, "sglang")
    assert a.state == RunState.CRASHED and not a.was_ready
    # an answered request before it: the HTTP server served, whatever the warm-up did
    answered = LAUNCH[4].encode() + b"\n" + log.split(b"\n", 1)[1]
    assert analyze_bytes(answered, "sglang").was_ready


# -- a traceback whose top is above the window --------------------------------------------------
_HEAD = "ERROR 01-21 06:59:30 [core.py:634] "
_EXC = "RuntimeError: The Inner error is reported as above."


@pytest.mark.parametrize(
    ("above", "evidence"),
    [
        (["    placeholders[is_embed] = embeds", "    ~~~~~~~~~~~~^^^^^^^^^^"], "traceback"),
        (["    placeholders[is_embed] = embeds"], "traceback"),
        (['  File "/vllm/v1/engine/core.py", line 9, in step', "    placeholders[is_embed] = embeds"], "traceback"),
        (["EngineCore failed."], "error line"),
        ([], "error line"),
    ],
)
def test_an_exception_line_under_its_frames_code_ends_a_traceback(above: list[str], evidence: str) -> None:
    text = "".join(f"{_HEAD}{ln}\n" for ln in [*above, _EXC])
    rc = analyze_bytes(text.encode(), "vllm").root_cause
    assert rc is not None and rc.exception == "RuntimeError" and rc.evidence == EVIDENCE_WORDS[evidence]


def test_a_code_line_of_another_record_level_does_not_make_a_traceback() -> None:
    text = f"INFO 01-21 06:59:30 [core.py:1]     placeholders[is_embed] = embeds\n{_HEAD}{_EXC}\n"
    rc = analyze_bytes(text.encode(), "vllm").root_cause
    assert rc is not None and rc.evidence == EVIDENCE_WORDS["error line"]


@pytest.mark.parametrize("name", ["llm-d-cuda-dev-triple-tag-workerproc-importerror-cdiv-663.log", "vllm-ascend-310p-aclnnisneginf-inner-error-output-handler-failed-6082.log"])
def test_the_fresh_logs_cut_inside_a_traceback_read_it_as_one(name: str) -> None:
    rc = analyze_bytes((FRESH / name).read_bytes(), "vllm").root_cause
    assert rc is not None and rc.evidence == EVIDENCE_WORDS["traceback"]


# -- a node's log without rank 0 ----------------------------------------------------------------
_NODE = FRESH / "sglang-multinode-deepseek-r1-tp24-31-load-weight-begin-end-3784.log"


def test_a_nodes_log_without_rank_zero_follows_its_first_rank() -> None:
    data = _NODE.read_bytes()
    a = analyze_bytes(data, "sglang")
    assert a.state == RunState.LOADING and a.stage("weights").status == "running"
    # rank 0's lines lead where they are: TP26's do not move the stages after TP0's
    led = data.replace(b" TP24]", b" TP0]")
    assert analyze_bytes(led, "sglang").stage("weights").status == "running"
    # a per-rank reader keeps to rank 0 (the node view swaps the rank it reads into rank 0)
    only_zero = LogAnalyzer(SGLANG, rank_zero_only=True)
    only_zero.feed(data)
    assert only_zero.snapshot().state == RunState.STARTING
