"""The probe against a real tiny vLLM with n-gram speculation: readiness, timing, acceptance, results."""

from __future__ import annotations

import asyncio
import json

import pytest

from servelab.engines.adapters.base import get_adapter
from servelab.engines.catalog.folder import load_catalog
from servelab.engines.errors import ServelabError
from servelab.engines.probe import prompts
from servelab.engines.catalog.experiment import ProbeSettings
from servelab.engines.probe.runner import run_probe, wait_ready
from tests.conftest import EXPERIMENTS
from tests.fixtures.engine import TinyServer
from tests.fixtures.ports import free_port

pytestmark = pytest.mark.engine

#: Names ``vllm bench serve`` writes in its result file that the probe must use the same way.
BENCH_KEYS = {
    "date", "endpoint_type", "backend", "label", "model_id", "num_prompts", "request_rate", "max_concurrency",
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
    "output_throughput", "total_token_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
    "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms",
    "spec_decode_acceptance_rate", "spec_decode_acceptance_length", "spec_decode_num_drafts",
    "spec_decode_draft_tokens", "spec_decode_accepted_tokens", "spec_decode_per_position_acceptance_rates",
}


@pytest.fixture(scope="module")
def probed(tiny_vllm: TinyServer) -> dict:
    """One probe (2 repeats) shared by the assertions below."""
    exp = load_catalog(EXPERIMENTS).get("tiny-cpu-vllm-ngram").experiment
    ps = prompts.builtin("mixed")
    result = asyncio.run(run_probe(
        tiny_vllm.url, ps, ProbeSettings(max_tokens=32, concurrency=1, repeats=2, warmup=1),
        adapter=get_adapter("vllm"), experiment=exp, identity={"engine": "vllm"}, label="t",
    ))
    return {"summary": json.loads(result.summary_json()), "requests": [json.loads(line) for line in result.requests_jsonl().splitlines()], "prompts": ps}


def test_acceptance_is_real_and_consistent(probed: dict) -> None:
    s = probed["summary"]
    assert s["acceptance_source"].startswith("vllm /metrics")
    for rep in s["per_repeat"]:
        drafts, draft_tokens, accepted = rep["spec_decode_num_drafts"], rep["spec_decode_draft_tokens"], rep["spec_decode_accepted_tokens"]
        assert drafts > 0 and 0 < accepted <= draft_tokens <= 4 * drafts
        assert rep["spec_decode_acceptance_rate"] == pytest.approx(100 * accepted / draft_tokens)
        assert rep["spec_decode_acceptance_length"] == pytest.approx(1 + accepted / drafts)
        per = rep["spec_decode_per_position_acceptance_rates"]
        assert len(per) == 4
        assert sum(per) == pytest.approx(accepted / drafts)
        assert all(b <= a + 0.05 for a, b in zip(per, per[1:], strict=False)), per
    assert 0 < s["spec_decode_acceptance_rate"] <= 100
    assert s["spec_decode_acceptance_length"] > 1


def test_timing_follows_server_token_counts(probed: dict) -> None:
    s, rows = probed["summary"], probed["requests"]
    n = len(probed["prompts"])
    assert s["num_prompts"] == n and s["completed"] == n and s["failed"] == 0
    assert len(rows) == 2 * n
    for rep in s["per_repeat"]:
        assert rep["output_throughput"] == pytest.approx(rep["total_output_tokens"] / rep["duration"])
    for r in rows:
        assert r["ok"] and 1 <= r["output_tokens"] <= 32
        assert r["finish_reason"] in ("stop", "length") and r["eos"] == (r["finish_reason"] == "stop")
        if r["output_tokens"] > 1:
            assert r["tpot_ms"] == pytest.approx((r["e2el_ms"] - r["ttft_ms"]) / (r["output_tokens"] - 1))
        assert 0 < r["ttft_ms"] <= r["e2el_ms"]
    # n-gram speculation commits several tokens per step, so chunks carry more than one token.
    assert s["mean_tokens_per_chunk"] > 1.0
    assert set(s["per_category"]) == set(prompts.CATEGORIES)
    assert all(c["requests"] == 2 * 2 for c in s["per_category"].values())  # 2 prompts x 2 repeats
    assert s["itl_is_per_chunk"] is True


def test_results_use_bench_names_and_record_identity(probed: dict) -> None:
    s = probed["summary"]
    assert BENCH_KEYS <= set(s)
    assert s["model_id"] == "tiny-llama" and s["backend"] == "vllm"
    assert s["prompt_set_hash"] == probed["prompts"].hash == s["identity"]["prompt_set_hash"]
    assert s["identity"]["engine_version"] == "0.32.0"
    for key, fig in s["stats"].items():
        if isinstance(fig, dict):
            assert fig["n"] == 2 and fig["mad"] >= 0
            assert fig["unstable"] == (fig["mad"] > 0.1 * abs(fig["median"])), key
            assert (key in s["unstable"]) == fig["unstable"]


async def test_nothing_listening_is_one_clean_line() -> None:
    import httpx

    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{free_port()}", trust_env=False) as http:
        with pytest.raises(ServelabError, match="not ready after 2 s") as info:
            await wait_ready(http, timeout_s=2)
    assert "\n" not in str(info.value)
