"""Every real log in ../shared/logs with what the analyzer must find.

Each entry states the engine the log is guessed as, the run state, the root cause (exception type,
a fragment of its message, the process, the line in the file) or None, the stage statuses that
matter, bar progress, the hint fragment and speculative-decoding figures. Many of these logs are
excerpts whose traceback is cut off: there the analyzer must still name the failing process and
line, and must not invent an exception.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from servelab.engines.logs.files import analyze_file, guess_engine
from tests.conftest import SHARED_LOGS
from tests.fixtures.log_expect import LogExpect, check_progress, check_spec_and_throughput

SHARED = SHARED_LOGS  # ../shared/logs: the real logs the project is given


@dataclass
class Expect(LogExpect):
    stages: dict[str, str] = field(default_factory=dict)
    progress: dict[str, tuple[int, int]] = field(default_factory=dict)
    hint: str | None = None
    #: (acceptance_rate, mean_acceptance_length, number of per-position rates)
    spec: tuple[float | None, float, int] | None = None
    gen_tps: float | None = None
    where: str | None = None


CUT = "cut off before its exception line"

CASES: dict[str, Expect] = {
    # -- SGLang: failures ---------------------------------------------------------------------
    "sglang-alloc-req-slots-oom-10408.log": Expect(
        "sglang", "crashed", root=("RuntimeError", "alloc_req_slots runs out of memory", "", 5), hint="--max-running-requests"
    ),
    "sglang-cudagraph-capture-chained-exception-7918.log": Expect(
        # chained: the first exception (printed before "During handling ...") is the cause, with all its lines
        "sglang", "crashed", root=("RuntimeError", "operation not permitted when stream is capturing\nCUDA kernel errors", "", 12),
        hint="not CUDA-graph safe", where="moe/topk.py:322 in biased_grouped_topk_gpu",
    ),
    "sglang-eagle3-official-draft-8229.log": Expect("sglang", "crashed", root=(None, CUT, "", 4), where="speculative/eagle_worker.py:124 in __init__"),
    "sglang-eagle3-sigquit-scheduler-exception-5448.log": Expect(
        # the launcher's "Received sigquit" comes first but is a wrapper: the failing rank is TP3
        "sglang", "crashed", root=(None, CUT, "TP3", 9)
    ),
    "sglang-kimi-k26-eagle3-draft-mla-backend-23490.log": Expect(
        "sglang", "crashed", root=(None, CUT, "TP2", 18), where="managers/scheduler.py:666 in maybe_init_draft_worker"
    ),
    "sglang-nccl-sigquit-typo-tp2-3460.log": Expect(
        "sglang", "crashed", root=(None, CUT, "TP2", 7), where="model_executor/model_runner.py:253 in init_torch_distributed"
    ),
    "sglang-runtime-kv-pool-exhaustion-26265.log": Expect("sglang", "crashed", True, root=(None, CUT, "TP0", 4), where="mem_cache/common.py:486 in alloc_for_extend"),
    "sglang-sigquit-scheduler-init-oom-pr19781.log": Expect("sglang", "crashed", root=(None, CUT, "TP3", 6), where="managers/tp_worker.py:330 in _init_model_runner"),
    # -- SGLang: startup grammar --------------------------------------------------------------
    "sglang-cudagraph-capture-end-pr12978.log": Expect("sglang", "loading", stages={"cuda_graphs": "done"}, progress={"cuda_graphs": (36, 36)}),
    "sglang-dp-tp-prefix-negative-kv-7691.log": Expect(
        "sglang", "loading", stages={"kv_cache": "running"}, hint="profiled KV budget is negative"
    ),
    "sglang-draft-cudagraph-timing-10088.log": Expect("sglang", "loading", stages={"cuda_graphs": "done"}),
    "sglang-kvcache-cudagraph-bs-pr11830.log": Expect(
        "sglang", "loading", stages={"kv_cache": "done", "cuda_graphs": "done"}, progress={"cuda_graphs": (52, 52)}
    ),
    "sglang-nccl-debug-info-noise-8974.log": Expect("sglang", "starting", stages={"config": "running", "weights": "pending"}),
    "sglang-ready-uvicorn-model-info-pr11830.log": Expect(
        # uvicorn is up but the launcher's warm-up has not said "fired up": not ready yet
        "sglang", "loading", stages={"cuda_graphs": "done", "warmup": "running", "ready": "pending"}
    ),
    "sglang-startup-head-dist-load-pr15426.log": Expect(
        "sglang", "loading", stages={"config": "done", "weights": "running"}, progress={"weights": (1, 4)}
    ),
    "sglang-startup-load-kv-cudagraph-pr4826.log": Expect(
        # the capture bar has flashinfer output glued on after a \r: still read as 23/23
        "sglang", "loading", stages={"kv_cache": "done", "cuda_graphs": "running"}, progress={"cuda_graphs": (23, 23)}
    ),
    "sglang-startup-tp8-load-weight-begin-pr11716.log": Expect("sglang", "loading", stages={"config": "done", "weights": "running"}),
    # -- SGLang: metrics ----------------------------------------------------------------------
    "sglang-decode-accept-len-eagle3-11948.log": Expect("sglang", "ready", True, spec=(0.45, 1.80, 0), gen_tps=165.59),
    "sglang-prometheus-metrics-pr7944.log": Expect("sglang", "starting"),
    # -- vLLM: failures -----------------------------------------------------------------------
    "vllm-apiserver-final-wrapper-gpustack-2723.log": Expect(
        # only the misleading front-end wrapper is in the log: never name it the root cause
        "vllm", "crashed", root=None, hint="only a wrapper was logged"
    ),
    "vllm-workerproc-wrapper-enginecore-44411.log": Expect("vllm", "crashed", root=None, hint="only a wrapper was logged"),
    "vllm-eagle3-gptoss-workerproc-failed-26328.log": Expect(
        # the worker failed first; EngineCore's re-raise later is secondary
        "vllm", "crashed", root=(None, "WorkerProc failed to start", "Worker_TP1", 9), stages={"drafter": "failed"}
    ),
    # (a cut traceback's answer starts at the wrapper record it was logged with, "EngineCore failed to start.")
    "vllm-eagle3-qwen3-30b-a3b-enginecore-failed-25134.log": Expect(
        "vllm", "crashed", root=(None, CUT, "EngineCore_DP0", 7), stages={"weights": "done", "drafter": "failed"}
    ),
    "vllm-eagle3-qwen3-32b-runtime-crash-28919.log": Expect(
        # was_ready: vLLM dumps the scheduler output only when a scheduled batch fails (issue #20: serving evidence)
        "vllm", "crashed", True, root=(None, "Dumping scheduler output", "EngineCore_DP0", 26), stages={"weights": "done"}, progress={"weights": (17, 17)}
    ),
    "vllm-eagle3-speculators-drafter-load-54526.log": Expect(
        "vllm", "crashed", root=(None, CUT, "Worker_TP3", 5), where="spec_decode/llm_base_proposer.py:1346 in load_model"
    ),
    "vllm-eagle3-whitelist-gemma3-32765.log": Expect(
        "vllm", "crashed", root=("ValueError", "Eagle3 is only supported for ['llama', 'qwen', 'minicpm', 'gpt_oss'] models", "", 3), hint="EAGLE-3 whitelist"
    ),
    "vllm-enginecore-failed-v0.9-style-18730.log": Expect(
        "vllm", "crashed", root=(None, CUT, "", 9), stages={"weights": "done", "compile": "failed"}, where="engine/core.py:71 in init"
    ),
    "vllm-nccl-allreduce-init-device-25148.log": Expect("vllm", "crashed", root=(None, CUT, "EngineCore_DP0", 5), where="worker/worker_base.py:611 in init_device"),
    "vllm-nccl-unhandled-system-error-7800.log": Expect(
        "vllm", "crashed", root=("Exception", "NCCL error: unhandled system error", "VllmWorkerProcess", 4), hint="NCCL"
    ),
    "vllm-oom-cudagraph-capture-17462.log": Expect("vllm", "crashed", root=(None, CUT, "VllmWorker rank=0", 6), where="compilation/backends.py:677 in __call__"),
    "vllm-workerproc-failed-tp-ep-prefix-56007.log": Expect(
        # the marker line and the traceback right after it: the traceback (with its frame) wins
        "vllm", "crashed", root=(None, CUT, "Worker_TP0_EP0", 4), where="executor/multiproc_executor.py:680 in __init__"
    ),
    # -- vLLM: startup grammar ----------------------------------------------------------------
    # vLLM binds its port before it builds the engine: its front end's start line and route list
    # come once the engine is up (three cold readers, fresh-13, -14 and -20, read them as ready)
    "vllm-api-server-routes-kvcached-250.log": Expect("vllm", "ready", was_ready=True, stages={"ready": "done"}),
    "vllm-cudagraph-bars-tp-club-3090-745.log": Expect("vllm", "loading", stages={"cuda_graphs": "done"}, progress={"cuda_graphs": (5, 5)}),
    "vllm-cudagraph-capture-bars-pr39559.log": Expect("vllm", "loading", stages={"kv_cache": "done", "cuda_graphs": "running"}, progress={"cuda_graphs": (51, 51)}),
    "vllm-cudagraph-memory-profiling-pr30515.log": Expect("vllm", "loading", stages={"kv_cache": "running"}),
    "vllm-kvcache-torchcompile-kimi-linear-28228.log": Expect("vllm", "loading", stages={"compile": "done", "kv_cache": "running"}),
    "vllm-ray-worker-prefix-oom-15598.log": Expect("vllm", "loading", stages={"cuda_graphs": "running"}),
    "vllm-shards-caret-M-club-3090-751.log": Expect("vllm", "loading", stages={"weights": "running"}, progress={"weights": (27, 66)}),
    "vllm-shards-carriage-return-prefix-39610.log": Expect("vllm", "loading", stages={"weights": "running"}, progress={"weights": (19, 125)}),
    "vllm-shm-broadcast-wait-warmup-pr39910.log": Expect("vllm", "loading", stages={"weights": "done", "compile": "done", "kv_cache": "running"}),
    "vllm-startup-compile-kv-cudagraph-ready-GLM-V-204.log": Expect(
        "vllm", "loading", stages={"compile": "done", "kv_cache": "done", "cuda_graphs": "done", "warmup": "running"}, progress={"cuda_graphs": (35, 35)}
    ),
    "vllm-startup-head-apiserver-pr24162.log": Expect("vllm", "starting", stages={"process": "done", "config": "running"}),
    "vllm-startup-load-model-pr24392.log": Expect("vllm", "loading", stages={"weights": "running"}, progress={"weights": (5, 8)}),
    "vllm-startup-model-loading-compile-pr29335.log": Expect(
        "vllm", "loading", stages={"compile": "done", "kv_cache": "done", "cuda_graphs": "running"}, progress={"cuda_graphs": (35, 35)}
    ),
    "vllm-torchcompile-took-profiling-pr48214.log": Expect("vllm", "loading", stages={"compile": "done", "kv_cache": "running"}),
    "vllm-cpu-ngram-startup-and-serve.log": Expect(
        "vllm", "exited", True,
        stages={s: "done" for s in ("process", "config", "weights", "drafter", "compile", "kv_cache", "warmup", "ready")} | {"cuda_graphs": "pending"},
        progress={"weights": (1, 1)}, spec=(0.674, 3.23, 4), gen_tps=0.0,
    ),
    # -- vLLM: metrics ------------------------------------------------------------------------
    "vllm-specdecode-metrics-dflash-AEON-7-6.log": Expect("vllm", "ready", True, spec=(0.091, 2.37, 15)),
    "vllm-specdecode-prometheus-dp-pr24049.log": Expect("vllm", "starting"),
    "vllm-specdecode-prometheus-kimi-eagle3-pr35966.log": Expect("vllm", "starting"),
    "vllm-specdecode-zero-acceptance-vllm-ascend-13665.log": Expect("vllm", "ready", True, spec=(0.0, 1.0, 5)),
    "vllm-throughput-and-specdecode-interleaved-genesis-24.log": Expect("vllm", "ready", True, spec=(0.40, 2.20, 3), gen_tps=0.0),
    "vllm-throughput-mtp-43295.log": Expect("vllm", "ready", True, gen_tps=1242.7),
}


def test_every_shared_log_has_an_expectation() -> None:
    assert sorted(p.name for p in SHARED.glob("*.log")) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_shared_log(name: str) -> None:
    exp = CASES[name]
    path = SHARED / name
    assert guess_engine(path.read_bytes()[:65536]) == exp.engine
    a = analyze_file(path)
    assert a.engine == exp.engine
    assert a.state == exp.state
    assert a.was_ready is exp.was_ready
    if exp.root is None:
        assert a.root_cause is None
    else:
        rc = a.root_cause
        assert rc is not None, "no root cause"
        exc, fragment, process, line = exp.root
        assert (rc.exception, rc.process, rc.line) == (exc, process, line)
        assert fragment in rc.message
        if exc is not None:
            assert not any(w in rc.message for w in ("See root cause above", "WorkerProc initialization failed", "Received sigquit"))
    if exp.where is not None:
        assert a.root_cause is not None and a.root_cause.where == exp.where
    for stage, status in exp.stages.items():
        assert a.stage(stage).status == status, stage
    check_progress(a, exp.progress)
    if exp.hint is None:
        assert a.hint is None
    else:
        assert a.hint is not None and exp.hint in a.hint
    check_spec_and_throughput(a, exp.spec, exp.gen_tps)
    js = a.to_json()
    assert [s["name"] for s in js["stages"]] == ["process", "config", "weights", "drafter", "compile", "kv_cache", "cuda_graphs", "warmup", "ready"]
    assert js["state"] in ("starting", "loading", "ready", "crashed", "exited")
