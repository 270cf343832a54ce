"""One-line next steps for known failures: a table, first match wins.

Each entry is ``(needles, hint)``: the hint applies when every needle (a plain, case-sensitive
substring) is in the failure text (root cause type, message and traceback excerpt). To add a known
failure, add one line. Engine-specific entries live in the engine's grammar (``LogGrammar.hints``)
and are tried first.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["HINTS", "find_hint"]


def _alike(hint: str, *needles: tuple[str, ...]) -> list[tuple[tuple[str, ...], str]]:
    """One hint for several failures: an entry per needle set, in this order."""
    return [(n, hint) for n in needles]


HINTS: list[tuple[tuple[str, ...], str]] = [
    # speculative decoding
    (("Eagle3 is only supported for",), "the target's model_type is not on vLLM's EAGLE-3 whitelist: add it in vllm/config/speculative.py (a patch) or use a listed target"),
    (("EAGLE3", "only supported"), "the target model is not on the engine's EAGLE-3 whitelist: patch the whitelist or use a listed target"),
    *_alike("an unknown key in the speculative config: check the key names against the engine's SpeculativeConfig", ("speculative", "Extra inputs are not permitted"), ("SpeculativeConfig", "extra_forbidden"), ("SpeculativeConfig", "Unexpected keyword")),
    (("Config' object has no attribute",), "the model's config class lacks an attribute the engine reads: patch the reader for this model (Kimi-K2.5 uses media_placeholder_token_id, not image_token_index)"),
    (("object has no attribute 'image_token_index'",), "the engine reads image_token_index from a config that lacks it: patch the reader for this model (Kimi-K2.5: media_placeholder_token_id)"),
    (("draft_worker", "attention"), "the drafter inherited the target's attention backend: set the drafter's own backend (SGLang: --speculative-draft-attention-backend)"),
    # patched engine files
    *_alike("a Python file does not parse (often a patched engine file): run python -m py_compile on it, fix it, and clear its __pycache__", ("SyntaxError",), ("IndentationError",)),
    (("ImportError", "cannot import name"), "an import inside the engine failed (a patch renamed or removed a name?): check the patched module and its imports"),
    # quantized checkpoints
    (("KeyError", "layers."), "a checkpoint tensor has no parameter in the model (KeyError while loading weights): the checkpoint's quantization layout (GPTQ g_idx, AWQ qweight, INT8/FP8 scales, biases) is not what this engine version expects; check --quantization against config.json's quantization_config, or use an engine version that supports this checkpoint"),
    # memory, where it ran out first (the failed stage or the wrapper says where)
    (("out of memory", "marlin_repack"), "GPU out of memory while Marlin repacks the quantized weights during loading: lower --gpu-memory-utilization so the repack's temporary buffers fit, or spread the model over more GPUs"),
    *_alike("GPU out of memory while capturing CUDA graphs: capture fewer or smaller graphs (SGLang: lower --cuda-graph-max-bs; vLLM: lower --max-num-seqs or the capture sizes) or leave them more room (SGLang: lower --mem-fraction-static; vLLM: lower --gpu-memory-utilization), or skip them (--disable-cuda-graph / --enforce-eager)", ("out of memory", "during CUDA graph capture"), ("OutOfMemoryError", "during CUDA graph capture")),
    (("out of memory", "during memory profiling"), "GPU out of memory during the memory profiling run (a dummy batch of max-num-batched-tokens): lower --max-num-batched-tokens / --max-num-seqs or --gpu-memory-utilization"),
    (("max_num_batched_tokens", "smaller than max_model_len"), "max_num_batched_tokens must be >= max_model_len: raise --max-num-batched-tokens or lower --max-model-len"),
    (("larger than the maximum number of tokens that can be stored in KV cache",), "the KV cache is too small for max-model-len: lower --max-model-len or raise --gpu-memory-utilization"),
    (("KV cache is needed, which is larger than the available KV cache memory",), "the KV cache is too small for max-model-len: lower --max-model-len or raise --gpu-memory-utilization (or the CPU KV cache space)"),
    (("No available memory for the cache blocks",), "no memory is left for the KV cache: raise --gpu-memory-utilization, lower --max-model-len, or use more GPUs"),
    (("profiled value -",), "the profiled KV budget is negative (weights already exceed the static memory fraction): raise --mem-fraction-static or use more GPUs"),
    (("alloc_req_slots runs out of memory",), "request slots ran out: lower --max-running-requests"),
    (("CUDA out of memory",), "GPU out of memory: lower --gpu-memory-utilization or --max-model-len / --max-num-seqs, or skip CUDA graphs with --enforce-eager (SGLang: lower --mem-fraction-static / --cuda-graph-max-bs)"),
    *_alike("GPU out of memory: lower --gpu-memory-utilization or --max-model-len / --max-num-seqs, or skip CUDA graphs with --enforce-eager", ("OutOfMemoryError",), ("CUDA error: out of memory",)),
    (("out of memory",), "GPU out of memory: lower --gpu-memory-utilization (SGLang: --mem-fraction-static) or --max-model-len / --max-num-seqs, or use more GPUs"),
    (("Not enough memory",), "not enough memory for the KV pool: lower --mem-fraction-static's reserved part, --max-running-requests, or context length"),
    (("less than requested memory for kv",), "the KV cache asks for more memory than is free: lower VLLM_CPU_KVCACHE_SPACE / --kv-cache-memory-bytes (on GPU: --gpu-memory-utilization)"),
    (("died unexpectedly", "exit code: -9"), "a worker was killed with SIGKILL, most likely by the kernel's OOM killer: check dmesg and lower the memory settings"),
    (("MemoryError",), "host (CPU) memory ran out: lower the KV cache space (VLLM_CPU_KVCACHE_SPACE / --gpu-memory-utilization on CPU) or --max-model-len"),
    (("memory", "exceeds", "total"), "the memory setting asks for more than the machine has: lower --gpu-memory-utilization (or the CPU KV cache space)"),
    (("gpu_memory_utilization",), "the memory fraction is not acceptable: use a --gpu-memory-utilization between 0 and 1 that fits the free memory"),
    # fatal evidence without a traceback (engines/logs/rules.py FATAL_EVIDENCE), and its echoes
    (("Assertion `", "` failed"), "a CUDA kernel's device-side assertion failed (an index out of range: a token id beyond the vocabulary, a bad draft or input): rerun with CUDA_LAUNCH_BLOCKING=1 so the error names the kernel that failed, and check the tokenizer / drafter vocabulary against the model"),
    (("device-side assert triggered",), "a CUDA kernel's device-side assertion failed (often an index out of range: a token id beyond the vocabulary): rerun with CUDA_LAUNCH_BLOCKING=1 so the error names the kernel, and look for the 'Assertion ... failed' line above it"),
    (("memory allocation failed with OOM", "during CUDA graph capture"), "the CUDA caching allocator ran out of memory while capturing CUDA graphs: capture fewer or smaller graphs (SGLang: lower --cuda-graph-max-bs; vLLM: lower --max-num-seqs) or leave them more room (SGLang: smaller --mem-fraction-static; vLLM: smaller --gpu-memory-utilization)"),
    (("memory allocation failed with OOM",), "the CUDA caching allocator ran out of GPU memory: leave the engine less of the GPU (SGLang: smaller --mem-fraction-static; vLLM: smaller --gpu-memory-utilization) or lower --max-num-seqs / --max-running-requests; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True helps when free memory is fragmented"),
    (("Watchdog caught collective operation timeout",), "an NCCL collective did not finish before the process group's timeout: one rank stalled or died first (find its error, maybe on another node); rerun with NCCL_DEBUG=INFO and TORCH_NCCL_DUMP_ON_TIMEOUT=1 (TORCH_NCCL_TRACE_BUFFER_SIZE=2000) to see which rank and collective; raise the timeout (SGLang: --dist-timeout) only for a step that is slow but healthy"),
    (("terminate called after throwing an instance of", "DistBackendError"), "a C++ NCCL error ended the process (SIGABRT): the 'what():' line after it names it; rerun with NCCL_DEBUG=INFO and check NCCL_* environment and the links between GPUs / nodes"),
    (("terminate called after throwing an instance of",), "an uncaught C++ exception ended the process (SIGABRT): the 'what():' line after it names it; for a CUDA error rerun with CUDA_LAUNCH_BLOCKING=1, for an NCCL one with NCCL_DEBUG=INFO"),
    (("died, exit code: -6",), "a worker aborted (SIGABRT): a C++ assertion or an uncaught C++ exception; look above for 'terminate called' or 'Assertion', or rerun with CUDA_LAUNCH_BLOCKING=1"),
    (("died, exit code -6",), "a worker aborted (SIGABRT): a C++ assertion or an uncaught C++ exception; look above for 'terminate called' or 'Assertion', or rerun with CUDA_LAUNCH_BLOCKING=1"),
    (("died, exit code: -11",), "a worker crashed with SIGSEGV (a native kernel or library fault): rerun with CUDA_LAUNCH_BLOCKING=1 and faulthandler (PYTHONFAULTHANDLER=1) to see where"),
    (("died, exit code -11",), "a worker crashed with SIGSEGV (a native kernel or library fault): rerun with CUDA_LAUNCH_BLOCKING=1 and faulthandler (PYTHONFAULTHANDLER=1) to see where"),
    (("died, exit code", "-9"), "a worker was killed with SIGKILL, most likely by the kernel's OOM killer: check dmesg and lower the memory settings"),
    # CUDA graphs
    (("operation not permitted when stream is capturing",), "a kernel is not CUDA-graph safe: retry with --disable-cuda-graph (SGLang) / --enforce-eager (vLLM), or without torch.compile"),
    # communication
    (("NCCL WARN", "Connect to"), "NCCL could not connect to another node: check that the nodes reach each other (firewall, NCCL's port range) and that NCCL and gloo use the right interface (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME)"),
    (("monitoredBarrier",), "this rank waited for another rank that failed first (the line names it): the root cause is in another rank's output, possibly on another node"),
    (("NCCL error",), "NCCL failed to set up: check NCCL_* environment (NCCL_P2P_DISABLE=1 on PCIe-only hosts), /dev/shm size and that every GPU is visible; rerun with NCCL_DEBUG=INFO"),
    (("ncclCommInitRank",), "NCCL failed to set up: check NCCL_* environment, /dev/shm size and GPU visibility; rerun with NCCL_DEBUG=INFO"),
    (("DistBackendError",), "the distributed backend failed: check NCCL_* environment and GPU visibility; rerun with NCCL_DEBUG=INFO"),
    (("gloo",), "gloo (CPU collectives) failed: check the host's network interface (GLOO_SOCKET_IFNAME) and that no stale process holds the rendezvous"),
    (("custom_all_reduce",), "custom all-reduce failed: retry with --disable-custom-all-reduce"),
    # ports, paths
    (("Address already in use",), "the port is taken: stop whatever listens there (servelab only stops its own runs) or change the experiment's port"),
    (("[Errno 98]",), "the port is taken: stop whatever listens there or change the experiment's port"),
    (("does not appear to have a file named config.json",), "the model or drafter path has no config.json: check model / speculative.draft_model on the host"),
    (("Repo id must",), "the model or drafter path does not exist on the host (it was taken for a hub id): check model / speculative.draft_model"),
    *_alike("the model or drafter path does not exist on the host: check model / speculative.draft_model", ("is not a local folder and is not a valid model identifier",), ("Invalid repository ID",), ("Repository Not Found",)),
    (("No such file or directory",), "a file the engine needs is missing: check the model / drafter paths and the engine's working directory"),
    # command line
    (("unrecognized arguments",), "the engine does not know a flag: check [engine_args] against this engine version's --help"),
    *_alike("a flag got a value the engine does not accept: check [engine_args] against this engine version's --help", ("invalid choice",), ("invalid", "value")),
]


def find_hint(texts: Iterable[str], extra: Iterable[tuple[str, str]] = ()) -> str | None:
    """The first hint whose needles all occur in the joined ``texts``; engine ``extra`` entries first."""
    blob = "\n".join(texts)
    if not blob:
        return None
    for needle, hint in extra:
        if needle in blob:
            return hint
    for needles, hint in HINTS:
        if all(n in blob for n in needles):
            return hint
    return None
