"""Engine adapters: exact argv for each engine, and what each cannot express."""

from __future__ import annotations

import json

import pytest

from servelab.engines.adapters.base import ENGINE_MODULES, EngineAdapter, all_adapters, get_adapter
from servelab.engines.catalog.folder import load_catalog
from servelab.engines.catalog.experiment import Experiment
from tests.conftest import EXPERIMENTS


def exp(**kw: object) -> Experiment:
    base: dict[str, object] = {"name": "x", "engine": "vllm", "model": "/m"}
    base.update(kw)
    return Experiment.model_validate(base)


def test_registry_lists_one_module_per_engine() -> None:
    assert {"vllm", "sglang"} <= set(ENGINE_MODULES)  # the built-ins; a plug-in adds itself (tests/test_third_engine.py)
    for adapter in all_adapters():
        assert isinstance(adapter, EngineAdapter)
    with pytest.raises(KeyError, match="unknown engine 'tgi'"):
        get_adapter("tgi")


def test_vllm_kimi_eagle3_matches_the_real_launch_command() -> None:
    """The bundled experiment reproduces origin.md's launch command, flag for flag."""
    cat = load_catalog(EXPERIMENTS)
    argv = cat.launch_spec(cat.get("kimi-k25-vllm-eagle3")).argv
    assert argv[:3] == ["/root/ml-env/bin/python3", "-m", "vllm.entrypoints.openai.api_server"]
    pairs = {argv[i]: argv[i + 1] for i in range(3, len(argv) - 1) if argv[i].startswith("--") and not argv[i + 1].startswith("--")}
    assert pairs["--model"] == "/shared/kimi-k2.5-int4"
    assert pairs["--tensor-parallel-size"] == "8"
    assert pairs["--tool-call-parser"] == "kimi_k2" and pairs["--reasoning-parser"] == "kimi_k2"
    assert pairs["--max-model-len"] == "32768" and pairs["--gpu-memory-utilization"] == "0.95"
    for bare in ("--trust-remote-code", "--enable-auto-tool-choice", "--disable-log-requests"):
        assert bare in argv
    spec = json.loads(pairs["--speculative-config"])
    assert spec == {"method": "eagle3", "model": "/data/eagle3/output_10k/4", "num_speculative_tokens": 5}


def test_vllm_ngram_config_keys() -> None:
    e = exp(speculative={"method": "ngram", "num_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2})
    flags = get_adapter("vllm").engine_flags(e, "/m", None)
    spec = json.loads(flags[flags.index("--speculative-config") + 1])
    assert spec == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


def test_vllm_extra_keys_pass_through_but_cannot_override() -> None:
    e = exp(speculative={"method": "eagle3", "draft_model": "/d", "num_tokens": 3, "extra": {"disable_padded_drafter_batch": True}})
    flags = get_adapter("vllm").engine_flags(e, "/m", "/d")
    assert json.loads(flags[flags.index("--speculative-config") + 1])["disable_padded_drafter_batch"] is True
    clash = exp(speculative={"method": "eagle3", "draft_model": "/d", "num_tokens": 3, "extra": {"num_speculative_tokens": 9}})
    assert any(p.path == "speculative.extra.num_speculative_tokens" for p in get_adapter("vllm").problems(clash))


def test_sglang_eagle3_chain_flags() -> None:
    e = exp(engine="sglang", parallel={"tensor": 8}, speculative={"method": "eagle3", "draft_model": "/d", "num_tokens": 3})
    argv = get_adapter("sglang").launch_spec(e, "py", "/m", "/d").argv
    assert argv[:3] == ["py", "-m", "sglang.launch_server"]
    joined = " ".join(argv)
    assert "--model-path /m" in joined and "--tp-size 8" in joined
    assert "--speculative-algorithm EAGLE3 --speculative-draft-model-path /d" in joined
    assert "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4" in joined


def test_sglang_method_names() -> None:
    a = get_adapter("sglang")
    for method, algo in (("eagle", "EAGLE"), ("mtp", "NEXTN"), ("ngram", "NGRAM"), ("draft_model", "STANDALONE")):
        draft = "/d" if method in ("eagle", "draft_model") else None
        e = exp(engine="sglang", speculative={"method": method, "num_tokens": 2, **({"draft_model": draft} if draft else {})})
        flags = a.engine_flags(e, "/m", draft)
        assert flags[flags.index("--speculative-algorithm") + 1] == algo


def test_sglang_cannot_express_a_chain_with_wrong_draft_tokens() -> None:
    e = exp(engine="sglang", speculative={"method": "eagle3", "draft_model": "/d", "num_tokens": 3, "num_draft_tokens": 7})
    assert [p.path for p in get_adapter("sglang").problems(e)] == ["speculative.num_draft_tokens"]


def test_engine_args_rendering() -> None:
    e = exp(engine_args={"enforce-eager": True, "max-model-len": 1024, "allowed-origins": ["a", "b"], "gpu-memory-utilization": 0.2})
    flags = get_adapter("vllm").engine_flags(e, "/m", None)
    assert flags[flags.index("--enforce-eager") + 1].startswith("--")
    assert flags[flags.index("--max-model-len") + 1] == "1024"
    assert flags[flags.index("--allowed-origins") + 1 : flags.index("--allowed-origins") + 3] == ["a", "b"]
    bad = exp(engine_args={"enforce-eager": False})
    assert any("false is not a flag value" in p.message for p in get_adapter("vllm").problems(bad))


def test_values_stay_literal_arguments() -> None:
    """Shell metacharacters are just characters inside one argv element."""
    evil = "$(touch /tmp/pwned); `id` 'q\" \n"
    e = exp(engine_args={"served-model-name-x": evil}, env={"X": evil})
    spec = get_adapter("vllm").launch_spec(e, "py", "/m", None)
    assert evil in spec.argv and spec.env["X"] == evil
