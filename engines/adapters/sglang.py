"""SGLang adapter: command line, log grammar, metrics reading and argument validation for SGLang.

The server is started as ``python -m sglang.launch_server``. Speculative decoding uses SGLang's
flat flags (``--speculative-algorithm EAGLE3``, ``--speculative-num-steps`` ...). On a chain
(top-k 1) servelab's ``num_tokens`` = k means k draft steps and k + 1 tokens verified per step.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servelab.engines.adapters.base import ArgValidation, engine_args_problems, render_flags
from servelab.engines.adapters.exchange import (
    Acceptance, Inexpressible, LatencyHistograms, LaunchSpec, NodePlan, NodeProcess, NodeTarget, PromptSet, RendezvousGrammar, SettingsGrammar, StopPlan,
)
from servelab.engines.catalog.experiment import Experiment
from servelab.engines.nodes.plan import host_port, multinode_problems, rendezvous_of, with_env
from servelab.engines.logs.grammar import UVICORN_ANSWERED, UVICORN_SERVED, BarRule, Evidence, FatalRule, LogGrammar, MetricRule, StageRule, Wrapper, parse_header
from servelab.engines.adapters.server_flags import ParallelFlag, flag_value, server_flags, with_flag

#: SGLang's host-side argument check, run by the host's interpreter (see engines/helpers/validate_args.py).
ARGCHECK = Path(__file__).with_name("sglang_argcheck.py")

if TYPE_CHECKING:
    import httpx

    from servelab.engines.drafter.rules import EngineRules, RulesQuery, SourceReader

#: Flags servelab sets per node of a multi-node experiment.
NODE_FLAGS = ("nnodes", "node-rank", "dist-init-addr")

MANAGED_FLAGS: dict[str, str] = {
    "model-path": "model",
    "model": "model",
    "port": "port",
    "served-model-name": "served_model_name",
    "tp": "parallel.tensor",
    "tp-size": "parallel.tensor",
    "dp": "parallel.data",
    "dp-size": "parallel.data",
    "ep": "parallel.expert",
    "ep-size": "parallel.expert",
    "pp": "parallel.pipeline",
    "pp-size": "parallel.pipeline",
    "speculative-algorithm": "speculative.method",
    "speculative-draft-model-path": "speculative.draft_model",
    "speculative-num-steps": "speculative.num_steps",
    "speculative-eagle-topk": "speculative.eagle_topk",
    "speculative-num-draft-tokens": "speculative.num_draft_tokens",
}

#: The parallel sizes' flags, in the order SGLang's command line has them.
PARALLEL_FLAGS = (ParallelFlag("tensor", "--tp-size"), ParallelFlag("data", "--dp-size"), ParallelFlag("expert", "--ep-size"), ParallelFlag("pipeline", "--pp-size"))

#: servelab's method names to SGLang's ``--speculative-algorithm`` values.
ALGORITHMS: dict[str, str] = {
    "eagle": "EAGLE",
    "eagle3": "EAGLE3",
    "mtp": "NEXTN",
    "ngram": "NGRAM",
    "draft_model": "STANDALONE",
}


# -- log grammar (data only; the machinery is engines/logs) ---------------------------------------
# Needles are message starts (after "[YYYY-MM-DD HH:MM:SS TPn] "), checked against the real logs
# in ../shared/logs; see ../shared/notes/engine-grammar.md sections 1.2, 2.2 and 5.2.
_W = ("weights", "drafter")
_TQDM_BAR = r":\s+\d+%\\?\|[^|]*\| (?P<n>\d+)/(?P<total>\d+) \[[\d:]+<[\d:?]+(?:,\s+(?P<rate>[\d.?]+)(?P<unit>s/it|it/s))?"

#: Where SGLang's logger header begins ("[2026-12-01 12:00:00 TP0] ").
_DATED = rb"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"

GRAMMAR = LogGrammar(
    engine="sglang",
    parse=parse_header,
    stage_rules=(
        StageRule("server_args=ServerArgs(", ("process",), "start", r"ServerArgs\((?P<a>.*)\)", "args {a:.300}"),
        # 0.5.23 prints the resolved arguments as a dict: "server_args={'model_path': ..., ...}"
        StageRule("server_args={", ("process",), "start", r"server_args=\{(?P<a>.*)\}", "args {a:.300}"),
        StageRule("Using default HuggingFace chat template", ("config",), "start"),
        StageRule("Init torch distributed begin", ("config",), "start", None, "distributed init"),
        StageRule("Init torch distributed ends", ("config",), "detail", None, "distributed init done"),
        # 0.5.23 wording (real CPU log): "Init parallel begin." / "Init parallel ends. elapsed=0.04 s"
        StageRule("Init parallel begin", ("config",), "start", None, "parallel init"),
        StageRule("Init parallel ends", ("config",), "detail", None, "parallel init done"),
        StageRule("Load weight begin", _W, "start", r"avail mem=(?P<m>[\d.]+) GB", "{m} GB free"),
        StageRule("Load weight end", _W, "end", r"type=(?P<t>[^,]+),.*?mem usage=(?P<u>-?[\d.]+) GB", "{t}, {u} GB"),
        StageRule("Using KV cache dtype", ("kv_cache",), "start"),
        StageRule("KV Cache is allocated", ("kv_cache",), "start", r"#tokens: (?P<t>\d+)", "KV cache {t} tokens"),
        StageRule("max_total_tokens=", ("kv_cache",), "start", r"profiled value (?P<v>-?\d+)", "profiled KV tokens {v}"),
        StageRule("Memory pool end", ("kv_cache",), "end"),
        StageRule("Capture cuda graph begin", ("cuda_graphs",), "start"),
        StageRule("Capture cuda graph end", ("cuda_graphs",), "end", r"elapsed: (?P<s>[\d.]+) s", "captured in {s} s"),
        StageRule("Capture draft cuda graph begin", ("cuda_graphs",), "start", None, "draft graphs"),
        StageRule("Capture draft cuda graph end", ("cuda_graphs",), "end", r"elapsed: (?P<s>[\d.]+) s", "draft captured in {s} s"),
        StageRule("Capture draft extend cuda graph", ("cuda_graphs",), "start", None, "draft extend graphs"),
        # 2026 wording (after SGLang PR 28937): "Capture target decode CUDA graph end. elapsed=22.18 s, ..."
        StageRule("Capture target ", ("cuda_graphs",), "start", r"(?i)cuda graph begin"),
        StageRule("Capture target ", ("cuda_graphs",), "end", r"(?i)cuda graph end\. elapsed=(?P<s>[\d.]+) s", "captured in {s} s"),
        StageRule("Capture draft ", ("cuda_graphs",), "start", r"(?i)cuda graph begin"),
        StageRule("Capture draft ", ("cuda_graphs",), "end", r"(?i)cuda graph end\. elapsed=(?P<s>[\d.]+) s", "draft captured in {s} s"),
        StageRule("max_total_num_tokens=", ("cuda_graphs",), "end"),
        StageRule("INFO:     Started server process", ("warmup",), "start"),
        StageRule("INFO:     Uvicorn running on", ("warmup",), "start", r"running on (?P<u>\S+)", "{u}"),
    ),
    bars=(
        BarRule("Loading safetensors", _W, r"Loading [^:]*?checkpoint shards[^:]*:\s+\d+% Completed \\?\| (?P<n>\d+)/(?P<total>\d+) \[[\d:]+<[\d:?]+,\s+(?P<rate>[\d.?]+)(?P<unit>s/it|it/s)\]"),
        # 0.5.23 (real CPU log): "Multi-thread loading shards: 100% Completed | 1/1 [00:00<00:00, 108.08it/s]"
        BarRule("Multi-thread loading shards", _W, r"Multi-thread loading shards:\s+\d+% Completed \\?\| (?P<n>\d+)/(?P<total>\d+) \[[\d:]+<[\d:?]+,\s+(?P<rate>[\d.?]+)(?P<unit>s/it|it/s)\]"),
        BarRule("Capturing batches", ("cuda_graphs",), r"Capturing batches \([^)]*\)" + _TQDM_BAR),
        BarRule("Compiling num tokens", ("compile",), r"Compiling num tokens \([^)]*\)" + _TQDM_BAR),
    ),
    ready=("The server is fired up and ready to roll",),
    # 0.5.23 on SIGTERM: "SIGTERM received. signum=None frame=None. Draining requests and shutting down..."
    shutdown=("INFO:     Shutting down", "INFO:     Application shutdown complete", "SIGTERM received"),
    wrappers=(
        Wrapper("Capture cuda graph failed", r"Capture cuda graph failed: (?P<inner>.*?)(?:\s*\nPossible solutions:|$)", "during CUDA graph capture"),
        Wrapper("Initialization failed. warmup error", r"warmup error: (?P<inner>.*)", "during the warm-up request"),
    ),
    fatal=(
        # "Received sigquit from a child process. It usually means the child failed.": a dead child,
        # evidence of death (its own traceback, when the window holds it, is stronger)
        FatalRule("Received sigquit from a child proc", r"(?P<message>Received sigquit from a child proces\w*)", rank=4, kind="process death", unnamed=True),
        # the same, in 2026 builds (tokenizer_manager's running_phase_sigquit_handler):
        # "SIGQUIT received. signum=None, frame=None. It usually means one child failed."
        FatalRule("SIGQUIT received.", r"(?P<message>SIGQUIT received\..*?It usually means one child failed\.?)", rank=4, kind="process death", unnamed=True),
        FatalRule("Scheduler hit an exception"),
        # the scheduler's watchdog: a batch ran past --watchdog-timeout and SGLang kills itself (each TP
        # rank says so): "Watchdog timeout (self.watchdog_timeout=300)"
        FatalRule("Watchdog timeout", r"(?P<message>Watchdog timeout \(self\.watchdog_timeout=[\d.]+\))", rank=2),
        # a child process died (real 0.5.23 log, scheduler killed after ready):
        # "Subprocess scheduler_0 (pid=1388) crashed with exit code -9. Triggering SIGQUIT for cleanup..."
        # a signal exit is fatal evidence without a traceback (ranked with the generic worker death)
        FatalRule("Subprocess ", r"Subprocess (?P<message>\S+ \(pid=\d+\) crashed with exit code -?\d+)", "ChildProcessError", rank=4),
        # uvicorn cannot bind (real 0.5.23 log; SGLang then hangs at "Waiting for application shutdown"):
        # "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 8792): address already in use"
        FatalRule("ERROR:    [Errno ", r"ERROR:\s+(?P<message>\[Errno \d+\] .+)$", "OSError"),
        # argparse's own exit (real 0.5.23 log): "sglang serve: error: unrecognized arguments: --no-such-flag 1"
        FatalRule(": error: ", r"^(?P<prog>[\w. -]+): error: (?P<message>.+)$", "ArgumentError", anywhere=True),
        FatalRule("Initialization failed. warmup error", r"warmup error: (?P<message>.+)", "Exception", warmup=True),
    ),
    metrics=(
        MetricRule(
            "Decode batch",
            "spec",
            r"accept len: (?P<mal>[\d.]+),(?: accept rate: (?P<rate>[\d.]+),)?",
        ),
        MetricRule("Decode batch", "throughput", r"gen throughput \(token/s\): (?P<gen>[\d.]+)"),
    ),
    warnings=("max_total_tokens=",),
    process_tiers=(("TP", "DP", "PP", "EP"),),
    # every scheduler rank logs as "[ts TP8] ..." (TP8-15 on node 1 of two 8-GPU nodes)
    rank_tag="TP",
    # uvicorn is up before the launcher's warm-up request and its "fired up" line
    # (not "Application startup complete": uvicorn prints it before binding, and a taken port fails after it)
    up=(Evidence("INFO:     Uvicorn running on"), UVICORN_ANSWERED),
    # a served request: an access line with a 2xx answer, a prefill batch (Decode batch lines are figures)
    serving=(UVICORN_SERVED, Evidence("Prefill batch")),
    # scheduler.py's crash dump of the requests it was running (the SIGQUIT / exception path)
    serving_errors=(Evidence("Dumping requests before crash"),),
    # the scheduler's event loops (event_loop_normal, event_loop_overlap, event_loop_pp...) run batches;
    # before them (2024) the controller's TP worker ran a decode batch in forward_decode_batch
    serving_frames=("event_loop_", "forward_decode_batch"),
    # the detokenizer's event loop wakes only for the scheduler's decoded tokens of a running batch
    serving_files=(("detokenizer_manager", "event_loop"),),
    # the launcher's warm-up request (after uvicorn is up, before "fired up") runs a prefill and a
    # decode batch in the scheduler's event loop
    warmup_work=("Prefill batch", "Decode batch"),
    frame_stages=(
        ("cuda_graph_runner", "cuda_graphs"),
        ("init_cuda_graphs", "cuda_graphs"),
        ("init_memory_pool", "kv_cache"),
        ("profile_max_num_token", "kv_cache"),
        ("load_weights", "weights"),
        ("load_model", "weights"),
        ("init_torch_distributed", "config"),
        ("initialize_model_parallel", "config"),
        ("init_model_parallel_group", "config"),
    ),
    spec_settings={"num_steps": ("server_args=", r"speculative_num_steps'?(?:=|: )(?P<v>\d+)")},
    # its logger header "[2026-12-01 12:00:00 TP0] " (a launcher may re-log it behind its own) and
    # the bare rank tag "[TP0] " (see engines/logs/prefix.py)
    line_starts=(_DATED, rb"\[(?:TP|DP|PP|EP)\d+[\] ]"),
    relogged_starts=(_DATED,),
)


class SglangAdapter:
    """SGLang (0.4.x-0.5.x, 2025-2026)."""

    name = "sglang"
    package = "sglang"
    #: Its own TTFT / inter-token histograms, shown beside the probe's figures.
    latency_histograms = LatencyHistograms("sglang:time_to_first_token_seconds", "sglang:inter_token_latency_seconds")
    #: 0.5.23 serves /metrics only with --enable-metrics; its counters carry the campaign's acceptance
    metrics_args: tuple[tuple[str, Any], ...] = (("enable-metrics", True),)
    log_signatures = (
        "sglang.launch_server",
        "sglang.srt",
        "server_args=ServerArgs(",
        "server_args={",
        "Scheduler hit an exception",
        "[TP0]",
        "The server is fired up and ready to roll",
        " TP0] ",
        " TP1] ",
        "sgl-project/sglang",
        "Load weight begin",
        "Load weight end",
        "Capture cuda graph",
        "Capturing batches (",
        "Decode batch",
        "Prefill batch",
        "Init torch distributed",
        "KV Cache is allocated",
        "max_total_num_tokens=",
        "sglang:",
    )
    #: How this engine's log reads (engines/logs applies it).
    grammar = GRAMMAR
    version_paths = ("/version", "/server_info", "/get_server_info")
    shm_prefixes = ("sglang", "sgl_")
    max_len_arg = "context-length"
    sampling_defaults_arg = "preferred-sampling-params"
    # SGLang logs every server argument, then the token pool and limits it worked out.
    settings = SettingsGrammar(
        args_line=r"server_args=(\{.*\})\s*$",
        resolved=(r"max_total_num_tokens=(?P<kv_cache_tokens>\d+)", r"max_running_requests=(?P<max_batch>\d+)",
                  r"context_len=(?P<max_len>\d+)"),
        names=(("max_running_requests", "max_batch", False), ("chunked_prefill_size", "max_batched_tokens", False),
               ("context_length", "max_len", False), ("disable_cuda_graph", "eager", False),
               ("disable_radix_cache", "prefix_caching", True), ("dtype", "dtype", False), ("quantization", "quantization", False),
               ("kv_cache_dtype", "kv_cache_dtype", False), ("mem_fraction_static", "memory_fraction", False),
               ("attention_backend", "attention_backend", False), ("max_total_tokens", "kv_cache_tokens", False),
               ("device", "device", False)),
        engine_args=(("kv_cache_tokens", "max-total-tokens"), ("max_batch", "max-running-requests"),
                     ("max_batched_tokens", "chunked-prefill-size"), ("max_len", "context-length"), ("eager", "disable-cuda-graph"),
                     ("dtype", "dtype"), ("quantization", "quantization"), ("kv_cache_dtype", "kv-cache-dtype"),
                     ("memory_fraction", "mem-fraction-static")),
        states_defaults=True,
        # "Using default chat sampling params from model generation config: {'temperature': 1.0, 'top_p': 0.95}"
        sampling_line=r"Using default chat sampling params from model generation config: (\{.*\})\s*$",
        # The running server's resolved arguments, its token pool and the batch limit it works to (0.5.23).
        info_paths=("/server_info", "/get_server_info"),
        info_figures=(("max_total_num_tokens", "kv_cache_tokens"), ("internal_states.0.effective_max_running_requests_per_dp", "max_batch")),
    )

    def problems(self, exp: Experiment) -> list[Inexpressible]:
        out = engine_args_problems(exp.engine_args, MANAGED_FLAGS)
        out += multinode_problems(exp, self.multinode_backends, NODE_FLAGS)
        s = exp.speculative
        if s.method == "none":
            return out
        if s.prompt_lookup_min is not None or s.prompt_lookup_max is not None:
            out.append(
                Inexpressible(
                    "speculative.prompt_lookup_min",
                    "SGLang's NGRAM has no prompt-lookup window; put its speculative-ngram-* flags in [speculative.extra]",
                )
            )
        if s.draft_tensor_parallel is not None and s.draft_tensor_parallel != exp.parallel.tensor:
            out.append(Inexpressible("speculative.draft_tensor_parallel", "SGLang runs the drafter with the target's tensor size"))
        topk = s.eagle_topk or 1
        if topk == 1 and s.num_draft_tokens is not None and s.num_draft_tokens != self._steps(exp) + 1:
            out.append(
                Inexpressible(
                    "speculative.num_draft_tokens",
                    f"on a chain (eagle_topk 1) SGLang verifies steps + 1 = {self._steps(exp) + 1} tokens",
                )
            )
        if s.method == "ngram" and (s.num_steps is not None or s.eagle_topk is not None):
            out.append(Inexpressible("speculative.num_steps", "NGRAM takes only num_tokens (draft tokens) in SGLang"))
        for key in s.extra:
            if key.startswith("-") or key in MANAGED_FLAGS:
                out.append(Inexpressible(f"speculative.extra.{key}", "write an SGLang flag name without dashes, not one servelab sets"))
        return out

    @staticmethod
    def _steps(exp: Experiment) -> int:
        s = exp.speculative
        return s.num_steps if s.num_steps is not None else (s.num_tokens or 1)

    def speculative_flags(self, exp: Experiment, draft_model: str | None) -> list[str]:
        s = exp.speculative
        if s.method == "none":
            return []
        flags = ["--speculative-algorithm", ALGORITHMS[s.method]]
        if draft_model:
            flags += ["--speculative-draft-model-path", draft_model]
        if s.method == "ngram":
            flags += ["--speculative-num-draft-tokens", str(s.num_tokens)]
        else:
            steps = self._steps(exp)
            topk = s.eagle_topk or 1
            draft_tokens = s.num_draft_tokens if s.num_draft_tokens is not None else steps + 1
            flags += [
                "--speculative-num-steps", str(steps),
                "--speculative-eagle-topk", str(topk),
                "--speculative-num-draft-tokens", str(draft_tokens),
            ]
        extra: dict[str, Any] = {k: v for k, v in s.extra.items() if k not in MANAGED_FLAGS}
        rendered, _ = render_flags(extra)
        return flags + rendered

    def engine_flags(self, exp: Experiment, model: str, draft_model: str | None) -> list[str]:
        return server_flags(exp, "--model-path", model, PARALLEL_FLAGS, MANAGED_FLAGS) + self.speculative_flags(exp, draft_model)

    def validation(self, exp: Experiment, model: str, draft_model: str | None) -> ArgValidation:
        """The server's own flags, judged on the host by SGLang's resolution and checks, then servelab's (no weights loaded)."""
        return ArgValidation(check=ARGCHECK, flags=self.engine_flags(exp, model, draft_model), label="SGLang's resolve_once + check_server_args")

    def launch_spec(self, exp: Experiment, python: str, model: str, draft_model: str | None) -> LaunchSpec:
        argv = [python, "-m", "sglang.launch_server", *self.engine_flags(exp, model, draft_model)]
        env = {"PYTHONUNBUFFERED": "1", "NO_COLOR": "1", **exp.env}
        return LaunchSpec(argv=argv, env=env)

    def rehearsal_spec(self, exp: Experiment, spec: LaunchSpec) -> LaunchSpec:
        """``--load-format dummy`` for the target and, with a drafter, ``--speculative-draft-load-format
        dummy``: SGLang 0.5.23 loads the draft runner with its own format when that flag is set
        (``model_runner._resolve_draft_load_format``; unset, the target's). Nothing else changes:
        the server's own warm-up request runs as in the launch."""
        argv = with_flag(spec.argv, "--load-format", "dummy")
        if flag_value(argv, "--speculative-draft-model-path") is not None:
            argv = with_flag(argv, "--speculative-draft-load-format", "dummy")
        return LaunchSpec(argv=argv, env=dict(spec.env))

    # -- drafter rules (engines/adapters/sglang_drafter.py) ------------------------------------------------
    async def drafter_rules(self, read: SourceReader, query: RulesQuery) -> EngineRules:
        from servelab.engines.adapters.sglang_drafter import read_rules

        return await read_rules(read, query)

    # -- several nodes ------------------------------------------------------------------------
    #: SGLang joins nodes itself (``--nnodes/--node-rank/--dist-init-addr``); it has no Ray mode.
    #: SGLang's own shutdown path: SIGTERM to the launch_server process alone, whose handler stops
    #: the HTTP server and reaps its scheduler and detokenizer itself (``Engine.shutdown`` ->
    #: ``kill_process_tree``); the group's SIGTERM only after half the grace, SIGKILL after 30 s at
    #: least. SIGTERM to the whole group at once had its children die under it and the stop end in SIGKILL.
    stop_plan = StopPlan(leader_first=True, min_grace_s=30.0)
    multinode_backends = ("native",)

    def node_plans(self, exp: Experiment, targets: list[NodeTarget]) -> list[NodePlan]:
        """The same command on every node but for ``--node-rank``; only rank 0 answers HTTP."""
        mn = exp.multinode
        if mn is None:
            return []
        plans: list[NodePlan] = []
        for t in targets:
            rank = t.node.rank
            init = host_port(*rendezvous_of(exp, targets, rank))
            tail = ["--nnodes", str(len(targets)), "--node-rank", str(rank), "--dist-init-addr", init]
            # A worker node only runs a dummy health server on --port. Two nodes at one address
            # (one machine) cannot both listen there: such a worker takes port+rank (SGLang's last
            # --port wins). Nodes at their own addresses run the same command but the rank.
            shared = any(o.node.address == t.node.address for o in targets[:rank])
            port = exp.port + rank if shared else exp.port
            tail += ["--port", str(port)] if port != exp.port else []
            spec = with_env(self.launch_spec(exp, t.python, t.model, t.draft_model), {}, tail)
            plans.append(NodePlan(t.node, [NodeProcess("server" if rank == 0 else "worker", spec, serves=rank == 0, port=port)]))
        return plans

    #: Every rank prints ``[.. TPk] Init parallel begin.`` / ``Init parallel ends.`` (0.5.x;
    #: ``Init torch distributed begin/ends.`` before), joining through ``--dist-init-addr``.
    rendezvous = RendezvousGrammar(
        begin=("Init parallel begin.", "Init torch distributed begin."),
        end=("Init parallel ends.", "Init torch distributed ends."),
        expected_s=90.0,
        settings="the nodes cannot join: check --dist-init-addr (the head's address and port) is the same on every node and reachable, GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME, and that no stale head from an earlier run holds the port",
        phrases=(
            ("via NET/Socket", "NCCL fell back to TCP sockets (slow, or stuck behind a firewall): check NCCL_SOCKET_IFNAME (and NCCL_IB_HCA) so it takes the fast interface"),
            ("NCCL INFO Using network Socket", "NCCL chose TCP sockets, not InfiniBand/RoCE (slow across nodes): check NCCL_SOCKET_IFNAME, NCCL_IB_HCA and that the IB devices are visible (a container needs them passed in)"),
        ),
        join_flags=("--dist-init-addr",),
    )

    # -- metrics reading ----------------------------------------------------------------------
    def read_acceptance(self, http: httpx.AsyncClient, exp: Experiment | None, prompts: PromptSet, max_tokens: int) -> SglangAcceptanceWindow:
        return SglangAcceptanceWindow(http, exp, prompts, max_tokens)

    def batch_size_schedule(self, exp: Experiment, best_k: list[tuple[int, int]]) -> str | None:
        """SGLang 0.5.23 has no per-batch-size draft length setting (one ``--speculative-num-steps``)."""
        return None


#: The counters (without ``_total``) whose growth gives SGLang's pooled acceptance length.
SPEC_COUNTERS = ("sglang:generation_tokens", "sglang:spec_verify_calls")


def draft_tokens_per_step(exp: Experiment | None) -> int | None:
    """Tokens SGLang drafts per verify step on a chain (None when not known)."""
    if exp is None or exp.speculative.method == "none":
        return None
    s = exp.speculative
    if s.num_draft_tokens is not None and s.method != "ngram":
        return s.num_draft_tokens - 1
    return s.num_steps if s.num_steps is not None and s.method != "ngram" else s.num_tokens


def _spec_record(obj: Any) -> dict[str, Any] | None:
    """Find a per-request record with ``spec_verify_ct`` in a /generate or OpenAI-route answer."""
    if isinstance(obj, dict):
        if "spec_verify_ct" in obj:
            return obj
        for key in ("meta_info", "sglext", "spec_tokens_details", "choices"):
            if key in obj:
                found = _spec_record(obj[key])
                if found is not None:
                    return found
    elif isinstance(obj, list):
        for item in obj:
            found = _spec_record(item)
            if found is not None:
                return found
    return None


def acceptance_from_records(records: list[dict[str, Any]], k: int | None, source: str) -> Acceptance | None:
    """Pool per-request (completion_tokens, spec_verify_ct): length = sum(completion) / sum(verify).

    Pooled (token-weighted) like SpecForge's ``accept_length``; the bonus token is counted, so
    accepted draft tokens = completion - verify steps, unless the records carry SGLang 0.5.23's own
    ``spec_num_correct_drafts`` / ``spec_num_proposed_drafts`` (then those, as its accept rate uses).
    """

    verify = sum(float(r.get("spec_verify_ct") or 0) for r in records)
    completion = sum(float(r.get("completion_tokens") or 0) for r in records)
    if verify <= 0 or completion <= 0:
        return None
    accepted = completion - verify
    draft_tokens: float | None
    if records and all(r.get("spec_num_proposed_drafts") is not None for r in records):
        # 0.5.23 counts them itself (tokenizer_manager): proposed = verify_ct x (num_draft_tokens - 1)
        draft_tokens = sum(float(r["spec_num_proposed_drafts"]) for r in records)
        if all(r.get("spec_num_correct_drafts") is not None for r in records):
            accepted = sum(float(r["spec_num_correct_drafts"]) for r in records)
    elif records and all(r.get("spec_draft_token_num") is not None for r in records):
        draft_tokens = sum(float(r["spec_draft_token_num"]) for r in records)
    else:
        draft_tokens = verify * k if k else None
    return Acceptance(
        source=source,
        drafts=verify,
        draft_tokens=draft_tokens,
        accepted=accepted,
        rate=accepted / draft_tokens if draft_tokens else None,
        length=completion / verify,
    )


class SglangAcceptanceWindow:
    """Acceptance the way SGLang counts it, from the best source the server offers.

    1. native ``POST /generate`` ``meta_info`` (``completion_tokens``, ``spec_verify_ct``) per prompt;
    2. else the OpenAI route's spec details (``return_spec_tokens_details``), per prompt;
    3. else ``/server_info`` ``internal_states[].avg_spec_accept_length`` (cumulative, server-wide).

    The per-prompt requests run after the timed ones, so they never disturb the timing.
    """

    def __init__(self, http: httpx.AsyncClient, exp: Experiment | None, prompts: PromptSet, max_tokens: int) -> None:
        self._http = http
        self._k = draft_tokens_per_step(exp)
        self._prompts = prompts
        self._max_tokens = max_tokens
        self._model = exp.served_model_name if exp is not None else None
        self._noted: list[dict[str, Any]] = []
        self._before: str | None = None

    async def start(self) -> None:
        self._noted.clear()
        self._before = await self._metrics_text() if self._k is not None else None

    async def _metrics_text(self) -> str | None:
        import httpx

        try:
            r = await self._http.get("/metrics")
        except httpx.HTTPError:
            return None
        return r.text if r.status_code == 200 else None

    async def _counters(self) -> Acceptance | None:
        """``/metrics`` counters across the window (``--enable-metrics``): SGLang adds each finished
        request's completion tokens to ``generation_tokens_total`` and its ``spec_verify_ct`` to
        ``spec_verify_calls_total`` (tokenizer_manager), so their growth is the pooled per-request
        rule above, without extra requests: what a campaign's recorded ``/metrics`` can replay."""
        from servelab.engines.probe.metrics import sum_counters

        if self._before is None:
            return None
        after = await self._metrics_text()
        if after is None:
            return None
        try:
            was, now = sum_counters(self._before, SPEC_COUNTERS), sum_counters(after, SPEC_COUNTERS)
        except ValueError:
            return None
        grown = {name: float(now.get(name, 0.0)) - float(was.get(name, 0.0)) for name in SPEC_COUNTERS}
        record = {"completion_tokens": grown[SPEC_COUNTERS[0]], "spec_verify_ct": grown[SPEC_COUNTERS[1]]}
        return acceptance_from_records([record], self._k, "sglang /metrics generation_tokens / spec_verify_calls (pooled, across the window)")

    def request_fields(self) -> dict[str, Any]:
        return {}

    def note(self, payload: Mapping[str, Any]) -> None:
        rec = _spec_record(dict(payload))
        if rec is not None:
            self._noted.append(rec)

    async def _native(self) -> Acceptance | None:
        import httpx

        records: list[dict[str, Any]] = []
        for p in self._prompts.prompts:
            body = {"text": p.text, "sampling_params": {"temperature": 0.0, "max_new_tokens": self._max_tokens}}
            try:
                r = await self._http.post("/generate", json=body)
                if r.status_code != 200:
                    return None
                rec = _spec_record(r.json())
            except (httpx.HTTPError, ValueError):
                return None
            if rec is None:
                return None
            records.append(rec)
        return acceptance_from_records(records, self._k, "sglang native /generate meta_info (per request, pooled)")

    async def _openai(self) -> Acceptance | None:
        import httpx

        if self._noted:
            return acceptance_from_records(self._noted, self._k, "sglang OpenAI-route spec details (per request, pooled)")
        records: list[dict[str, Any]] = []
        for p in self._prompts.prompts:
            body: dict[str, Any] = {
                "messages": [dict(m) for m in p.messages],
                "max_tokens": self._max_tokens,
                "temperature": 0.0,
                "return_spec_tokens_details": True,
            }
            if self._model:
                body["model"] = self._model
            try:
                r = await self._http.post("/v1/chat/completions", json=body)
                if r.status_code != 200:
                    return None
                data = r.json()
            except (httpx.HTTPError, ValueError):
                return None
            rec = _spec_record(data)
            if rec is None:
                return None
            rec = dict(rec)
            usage = data.get("usage") or {}
            rec.setdefault("completion_tokens", usage.get("completion_tokens"))
            records.append(rec)
        return acceptance_from_records(records, self._k, "sglang OpenAI-route spec details (per request, pooled)")

    async def _server_info(self) -> Acceptance | None:
        import httpx


        for path in ("/server_info", "/get_server_info"):
            try:
                r = await self._http.get(path)
                if r.status_code != 200:
                    continue
                info = r.json()
            except (httpx.HTTPError, ValueError):
                continue
            states = info.get("internal_states") or []
            lengths = [float(s["avg_spec_accept_length"]) for s in states if isinstance(s, dict) and s.get("avg_spec_accept_length") is not None]
            if not lengths:
                return None
            length = sum(lengths) / len(lengths)
            return Acceptance(
                source=f"sglang {path} avg_spec_accept_length (cumulative since start, server-wide, mean of {len(lengths)} rank(s))",
                drafts=None,
                draft_tokens=None,
                accepted=None,
                rate=(length - 1.0) / self._k if self._k else None,
                length=length,
            )
        return None

    async def finish(self) -> Acceptance | None:
        if self._k is None:
            return None  # the experiment does not speculate
        for source in (self._native, self._openai, self._server_info, self._counters):
            found = await source()
            if found is not None:
                return found
        return None


ADAPTER = SglangAdapter()
