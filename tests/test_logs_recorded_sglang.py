"""Real SGLang 0.5.23 logs recorded here on CPU (tests/data/logs/sglang-cpu-*.log, made by
record_sglang_logs.py; line 1 says how): the analyzer names the right root cause in each, or none.

For each failure: the state, the root cause (exception, message fragment, line, where), the stages
that ran or failed, and the hint when there is one. These are complete logs, so the root cause must
be an exception or line that is in the file, never a wrapper such as SGLang's "Received sigquit".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.engines.logs.files import analyze_file
from tests.fixtures.heldout import heldout_names

DATA = Path(__file__).resolve().parent / "data" / "logs"
WRAPPERS = ("Received sigquit", "Triggering SIGQUIT", "kill_process_tree")

#: name -> (exception, message fragment, line, where, {stage: status}, hint fragment or None)
CASES: dict[str, tuple[str, str, int, str | None, dict[str, str], str | None]] = {
    "sglang-cpu-bad-flag.log": (
        "ArgumentError", "unrecognized arguments: --no-such-flag 1", 479, None, {"process": "failed", "weights": "pending"}, "does not know a flag",
    ),
    "sglang-cpu-bad-speculative-algorithm.log": (
        "ValueError", "Unknown speculative algorithm name: EAGLE9", 29, "speculative/spec_info.py:65 in from_string", {"process": "failed", "weights": "pending"}, None,
    ),
    "sglang-cpu-missing-model.log": (
        # the first exception of the chain (the hub id check), not transformers' OSError re-raise after it
        "huggingface_hub.errors.HFValidationError", "'/nonexistent/models/tiny-llama'", 17, "utils/_validators.py:133 in validate_repo_id",
        {"process": "failed", "weights": "pending"}, "does not exist on the host",
    ),
    "sglang-cpu-port-in-use.log": (
        # uvicorn's bind error, not the SIGQUIT cleanup after the stop (SGLang hangs after it: stopped by hand)
        "OSError", "[Errno 98] error while attempting to bind on address ('127.0.0.1', 8792): address already in use", 59, None,
        {"weights": "done", "kv_cache": "done", "warmup": "failed", "ready": "pending"}, "the port is taken",
    ),
    "sglang-cpu-crash-after-ready.log": (
        # the launcher's line about its dead child, not the SIGQUIT / kill_process_tree cleanup after it
        "ChildProcessError", "scheduler_0 (pid=1388) crashed with exit code -9", 75, None, {"weights": "done", "ready": "done"}, None,
    ),
}
#: Failures after the server had served (the analyzer must say it was ready once).
WAS_READY = {"sglang-cpu-crash-after-ready.log"}
#: Logs of runs that ended without a failure of their own.
NOT_CRASHES = {"sglang-cpu-good-serve.log", "sglang-cpu-sigterm-while-loading.log"}


def test_every_recorded_sglang_log_has_a_case() -> None:
    # the held-out recordings (expectations-2026-12.json) are tested in test_logs_heldout.py
    assert {p.name for p in DATA.glob("sglang-cpu-*.log")} - heldout_names() == set(CASES) | NOT_CRASHES


@pytest.mark.parametrize("name", sorted(CASES))
def test_recorded_sglang_failure_names_its_root_cause(name: str) -> None:
    exc, fragment, line, where, stages, hint = CASES[name]
    path = DATA / name
    assert path.read_text(errors="replace").startswith("# made by: tests/data/logs/record_sglang_logs.py")
    a = analyze_file(path)
    assert a.engine == "sglang" and a.state == "crashed" and a.was_ready is (name in WAS_READY)
    rc = a.root_cause
    assert rc is not None
    assert (rc.exception, rc.line, rc.where) == (exc, line, where)
    assert fragment in rc.message and not any(w in rc.message for w in WRAPPERS)
    for stage, status in stages.items():
        assert a.stage(stage).status == status, stage
    if hint is None:
        assert a.hint is None or fragment not in a.hint
    else:
        assert a.hint is not None and hint in a.hint


def test_recorded_sigterm_while_loading_is_not_a_crash() -> None:
    """SIGTERM to the group at "Load weight begin": 0.5.23 prints nothing about it (no "SIGTERM received"
    while loading), so the file ends mid-load; the analyzer must not invent a failure."""
    a = analyze_file(DATA / "sglang-cpu-sigterm-while-loading.log")
    assert a.state != "crashed" and not a.was_ready
    assert a.root_cause is None and a.hint is None
    assert a.stage("weights").status == "done" and a.stage("kv_cache").status == "pending" and a.stage("ready").status == "pending"


def test_recorded_good_start_and_serve() -> None:
    """Started, served, stopped with SIGTERM: the scheduler's "crashed with exit code -15" after the stop is its echo."""
    a = analyze_file(DATA / "sglang-cpu-good-serve.log")
    assert a.state == "exited" and a.was_ready and a.root_cause is None and a.hint is None
    for stage in ("process", "config", "weights", "kv_cache", "warmup", "ready"):
        assert a.stage(stage).status == "done", stage
    weights = a.stage("weights").progress
    assert weights is not None and (weights.done, weights.total) == (1, 1)  # the "Multi-thread loading shards" bar
    assert "2048" in a.stage("kv_cache").detail  # --max-total-tokens, not system memory
    assert a.spec_decode is None  # no speculation
    assert sum(1 for p in a.throughput_series if p.generation_tps) >= 5  # "Decode batch ... gen throughput (token/s)"
