"""Real logs collected from public vLLM and SGLang issues and PRs (tests/data/logs), with what the analyzer must find.

These are the shapes a new user meets with ``servelab analyze``: excerpts that start inside a
traceback (no header), a crash after the server was answering (readiness from serving evidence),
wrappers whose message carries the cause (and says where it happened), processes interleaved line
by line, fragments with ``#`` gap lines, quantized-checkpoint weight-loading KeyErrors, out of
memory during profiling / CUDA-graph capture / Marlin repack, NCCL errors, multi-node runs with
node and rank tags, and healthy speculative-decoding logs of both engines.

Each entry states the engine, the state, whether it had been ready, the root cause (exception or
None when the excerpt cuts it off, a message fragment, the process, the line in the file), where it
broke, the stage that failed, the hint fragment(s), and spec-decode / throughput figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from servelab.engines.adapters.base import get_adapter
from servelab.engines.logs.analyzer import LogAnalyzer
from servelab.engines.logs.files import analyze_bytes, analyze_file, guess_engine
from tests.conftest import SHARED_LOGS
from tests.fixtures.heldout import heldout_names
from tests.fixtures.log_expect import LogExpect, check_progress, check_spec_and_throughput

DATA = Path(__file__).resolve().parent / "data" / "logs"
CUT = "cut off before its exception line"
WRAPPERS = ("See root cause above", "WorkerProc initialization failed", "Received sigquit", "Capture cuda graph failed", "EngineDeadError")
KEYERROR_HINT = "checkpoint"
OOM_HINT = "GPU out of memory"


@dataclass
class Expect(LogExpect):
    where: str | None = None
    #: the stage the run failed in (None: not stated by the log)
    failed_stage: str | None = None
    #: fragments that must all be in the hint (empty: no hint)
    hint: tuple[str, ...] = ()
    #: where the wrapper says it happened ("during CUDA graph capture")
    context: str | None = None
    #: (acceptance_rate, mean_acceptance_length, number of per-position rates)
    spec: tuple[float, float, int] | None = None
    gen_tps: float | None = None
    progress: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: text that must not be in the root cause's excerpt (lines from across a gap)
    not_in_excerpt: str | None = None


CASES: dict[str, Expect] = {
    # -- quantized checkpoints: weight-loading KeyErrors (GPTQ, AWQ, INT8) ----------------------
    "vllm-gptq-keyerror-g-idx-gap-25029.log": Expect(
        # two excerpts with a "#" gap: the KeyError's traceback is the second one, on its own
        "vllm", "crashed", root=("KeyError", "'layers.35.mlp.gate.g_idx'", "EngineCore_DP0", 22),
        where="models/qwen3_moe.py:574 in load_weights", failed_stage="weights", hint=(KEYERROR_HINT,),
        progress={"weights": (0, 5)}, not_in_excerpt="line 505, in __init__",
    ),
    "vllm-awq-keyerror-shared-expert-headless-25797.log": Expect(
        "vllm", "crashed", root=("KeyError", "'layers.45.mlp.shared_expert.down_proj.weight'", "EngineCore_DP0", 10),
        where="models/qwen3_next.py:1044 in load_weights", failed_stage="weights", hint=(KEYERROR_HINT,),
    ),
    "vllm-int8-w8a8-keyerror-weight-scale-v0-llm-compressor-959.log": Expect(
        "vllm", "crashed", root=("KeyError", "'layers.0.mlp.down_proj.weight_scale'", "", 13),
        where="models/qwen2.py:371 in load_weights", failed_stage="weights", hint=(KEYERROR_HINT,),
    ),
    # -- out of memory: Marlin repack, profiling, CUDA-graph capture, at runtime -----------------
    "vllm-marlin-repack-oom-headless-club-3090-60.log": Expect(
        "vllm", "crashed", root=("RuntimeError", "CUDA driver error: out of memory", "EngineCore", 11),
        where="vllm/_custom_ops.py:1279 in gptq_marlin_repack", failed_stage="weights", hint=("Marlin", "--gpu-memory-utilization"),
    ),
    "vllm-oom-profiling-sampler-raw-headless-27508.log": Expect(
        # raw traceback whose first line is the tail of a source line: the frames and the OOM line are still one traceback
        "vllm", "crashed", root=("torch.OutOfMemoryError", "CUDA out of memory. Tried to allocate 786.00 MiB", "EngineCore_DP0", 13),
        where="sample/sampler.py:86 in forward", hint=(OOM_HINT,),
    ),
    "vllm-oom-profile-run-cut-29349.log": Expect(
        # the logger-emitted traceback is cut at both ends: it is found from its first frame on
        "vllm", "crashed", root=(None, CUT, "EngineCore_DP0", 6), where="worker/gpu_model_runner.py:4357 in profile_run", failed_stage="kv_cache",
    ),
    "vllm-oom-runtime-enginecore-then-apiserver-club-3090-16.log": Expect(
        # one ERROR record that is only the exception line: it is the cause, not the API server's traceback after it.
        # was_ready: that traceback runs through AsyncLLM.output_handler, which reads an engine core that is up
        # (issue #20: a failure while serving; the note: it was serving real workloads)
        "vllm", "crashed", True, root=("torch.OutOfMemoryError", "Tried to allocate 50.00 MiB", "EngineCore", 5), hint=(OOM_HINT,),
    ),
    "sglang-capture-cudagraph-oom-wrapper-2node-5285.log": Expect(
        "sglang", "crashed", root=("Exception", "CUDA out of memory. Tried to allocate 448.00 MiB", "", 23),
        where="model_executor/cuda_graph_runner.py:269 in __init__", failed_stage="cuda_graphs", context="during CUDA graph capture",
        hint=("--cuda-graph-max-bs", "--mem-fraction-static"),
    ),
    "sglang-capture-cudagraph-gloo-chained-headless-4205.log": Expect(
        "sglang", "crashed", root=("Exception", "gloo/transport/tcp/pair.cc:534] Connection cl", "", 22),
        where="model_executor/cuda_graph_runner.py:239 in __init__", failed_stage="cuda_graphs", context="during CUDA graph capture",
        hint=("gloo",),
    ),
    # -- processes interleaved line by line --------------------------------------------------------
    "vllm-enginedead-interleaved-line-by-line-28714.log": Expect(
        # EngineCore's frames are its own (core.py:859), not the API server's core_client.py frames woven through them.
        # was_ready: the API server's traceback runs through AsyncLLM.output_handler, which reads the outputs of an
        # engine core that is up (issue #20: a failure while serving; the note: sleep mode hit while requests ran)
        "vllm", "crashed", True, root=(None, CUT, "EngineCore_DP0", 5), where="engine/core.py:859 in run_engine_core",
    ),
    # -- NCCL, multi-node (Ray node tags, rank tags, NCCL host tags) -----------------------------
    "sglang-nccl-unhandled-system-error-headless-4289.log": Expect(
        "sglang", "crashed", root=("RuntimeError", "NCCL error: unhandled system error", "", 17),
        where="device_communicators/pynccl_wrapper.py:329 in NCCL_CHECK", failed_stage="config", hint=("NCCL",),
    ),
    "vllm-ray-multinode-ip-tags-nccl-gpustack-2023.log": Expect(
        "vllm", "crashed", root=(None, CUT, "", 9), where="engine/core.py:320 in __init__",
    ),
    "vllm-ray-multinode-int8-keyerror-rank-tags-16827.log": Expect(
        # rank 0's KeyError comes first; the other node's workers then run out of memory
        "vllm", "crashed", root=("KeyError", "'model.layers.6.mlp.experts.w2_weight_scale'", "rank0", 8), hint=(KEYERROR_HINT,),
    ),
    # NCCL's own "... failed" warning is the cause once the run failed (fresh-18's 2101 reader named it over a
    # wrapper's cut traceback): TP0's "Scheduler hit an exception" cut before its exception line says less
    "sglang-multinode-nccl-socket-warn-tp0-5594.log": Expect(
        "sglang", "crashed", root=(None, "socketStartConnect: Connect to 10.0.0.82<38455> failed", "", 5), where="managers/scheduler.py:1714 in run_scheduler_process",
        hint=("NCCL could not connect",),
    ),
    "sglang-multinode-gloo-barrier-rank-tags-tp6-5602.log": Expect(
        "sglang", "crashed", root=(None, CUT, "TP6", 5), where="model_executor/model_runner.py:182 in __init__", hint=("another rank",),
    ),
    # -- crashes after the server was ready (serving evidence), speculative decoding ------------
    "sglang-eagle3-crash-after-ready-post-200-24402.log": Expect(
        "sglang", "crashed", True, root=(None, CUT, "", 6), where="managers/scheduler.py:3747 in dispatch_event_loop",
    ),
    "sglang-nextn-crash-after-decode-2026-header-pr21475.log": Expect(
        "sglang", "crashed", True, root=(None, CUT, "TP0", 7), where="managers/scheduler.py:3171 in run_scheduler_process",
        spec=(0.66, 2.64, 0), gen_tps=242.08,
    ),
    "sglang-mtp-crash-cri-timestamps-tp2-8336.log": Expect(
        # was_ready: the traceback runs through the scheduler's event_loop_normal (issue #20: a failure while serving)
        "sglang", "crashed", True, root=(None, CUT, "TP2", 5), where="managers/scheduler.py:1756 in run_batch",
    ),
    # -- healthy speculative decoding ----------------------------------------------------------------
    "vllm-specdecode-healthy-ngram-throughput-format-pr24127.log": Expect("vllm", "ready", True, spec=(0.888, 5.44, 5)),
    "vllm-specdecode-healthy-mtp-low-acceptance-41789.log": Expect("vllm", "ready", True, spec=(0.009, 1.03, 4), gen_tps=44.7),
    "sglang-specdecode-healthy-2025-header-fastrl-pr4.log": Expect("sglang", "ready", True, spec=(0.11, 1.00, 0), gen_tps=6138.60),
}


def test_every_collected_log_has_an_expectation() -> None:
    # recorded here: test_logs_recorded*.py; held out (stated in expectations-2026-12*.json): test_logs_heldout.py
    collected = {p.name for p in DATA.glob("*.log") if not p.name.startswith(("vllm-cpu-", "sglang-cpu-"))} - heldout_names()
    assert collected == set(CASES)
    assert len(CASES) >= 15


@pytest.mark.parametrize("name", sorted(CASES))
def test_collected_log(name: str) -> None:
    exp = CASES[name]
    path = DATA / name
    text = path.read_text()
    assert text.startswith("# source: ") and "(https://github.com/" in text.splitlines()[0]
    assert guess_engine(path.read_bytes()[:65536]) == exp.engine
    a = analyze_file(path)
    assert (a.engine, a.state, a.was_ready) == (exp.engine, exp.state, exp.was_ready)
    rc = a.root_cause
    if exp.root is None:
        assert rc is None
    else:
        assert rc is not None, "no root cause"
        exc, fragment, process, line = exp.root
        assert (rc.exception, rc.process, rc.line) == (exc, process, line)
        assert fragment in rc.message
        if exc is not None:
            assert not any(w in rc.message for w in WRAPPERS)
            assert fragment in text.splitlines()[line - 1]
        assert rc.where == exp.where
        assert rc.context == exp.context
        if exp.not_in_excerpt is not None:
            assert not any(exp.not_in_excerpt in ln for ln in rc.excerpt)
    if exp.failed_stage is not None:
        assert a.failed_stage == exp.failed_stage
        assert a.stage(exp.failed_stage).status == "failed"
    if exp.state == "crashed" and exp.was_ready:
        assert a.failed_stage is None and not any(s.status == "failed" for s in a.stages)
    if not exp.hint:
        assert a.hint is None
    else:
        assert a.hint is not None and all(h in a.hint for h in exp.hint), a.hint
    check_spec_and_throughput(a, exp.spec, exp.gen_tps)
    check_progress(a, exp.progress)
    js = a.to_json()
    assert js["failed_stage"] == a.failed_stage
    assert (js["root_cause"] or {}).get("context") == (rc.context if rc else None)


def test_gap_line_ends_a_traceback_but_a_comment_inside_a_message_does_not() -> None:
    """The gap rule is about lines that start with ``#``: the same bytes without the gap line join the
    two excerpts into one traceback (whose excerpt then reaches back across the gap)."""
    data = (DATA / "vllm-gptq-keyerror-g-idx-gap-25029.log").read_bytes()
    joined = b"".join(ln for ln in data.splitlines(keepends=True) if ln != b"# [...]\n")
    rc = analyze_bytes(joined, "vllm").root_cause
    assert rc is not None and rc.exception == "KeyError"
    assert any("line 505, in __init__" in ln for ln in rc.excerpt)


def test_sglang_http_up_then_crash_is_a_crash_after_ready() -> None:
    """SGLang's uvicorn lines come before its "fired up" line: on their own the run is still warming
    up (the shared log's expectation), but a crash after them is a crash of a server that was up."""
    up = (SHARED_LOGS / "sglang-ready-uvicorn-model-info-pr11830.log").read_bytes()
    crash = (DATA / "sglang-eagle3-crash-after-ready-post-200-24402.log").read_bytes()
    # the scheduler's traceback without its call into event_loop_normal (that call alone is serving
    # evidence): what is tested here is the uvicorn lines' order, not the frames
    crash_lines = b"".join(
        ln for ln in crash.splitlines(keepends=True) if (b"Scheduler hit" in ln or ln.startswith(b"  ")) and b"event_loop_normal" not in ln
    )
    an = LogAnalyzer(get_adapter("sglang").grammar)
    an.feed(up)
    before = an.snapshot()
    assert before.state == "loading" and not before.was_ready
    an.feed(crash_lines)
    an.finish()
    after = an.snapshot()
    assert after.state == "crashed" and after.was_ready and after.failed_stage is None
    # and the same crash lines straight after the capture (before uvicorn): a startup crash
    cut = up[: up.index(b"INFO:     Started server process")]
    b = analyze_bytes(cut + crash_lines, "sglang")
    assert b.state == "crashed" and not b.was_ready
