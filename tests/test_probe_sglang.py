"""SGLang acceptance sources, against FakeSglangServer (SGLang is GPU-only and cannot run here)."""

from __future__ import annotations

import pytest

from servelab.engines.adapters.base import get_adapter
from servelab.engines.catalog.folder import load_catalog
from servelab.engines.probe import prompts
from servelab.engines.catalog.experiment import ProbeSettings
from servelab.engines.probe.runner import run_probe
from servelab.engines.adapters.sglang import draft_tokens_per_step
from tests.conftest import EXPERIMENTS
from tests.fixtures.fake_sglang import AVG_ACCEPT_LENGTH, TOKENS_PER_STEP, FakeSglangServer, verify_steps

MAX_TOKENS = 15  # odd: the last verify step commits a single token


@pytest.fixture(scope="module")
def sglang_exp():  # type: ignore[no-untyped-def]
    return load_catalog(EXPERIMENTS).get("kimi-k25-sglang-eagle3").experiment


async def test_each_source_in_order(fake_sglang: FakeSglangServer, sglang_exp) -> None:  # type: ignore[no-untyped-def]
    ps = prompts.builtin("coding")
    k = draft_tokens_per_step(sglang_exp)
    assert k is not None and k >= 1
    result = await run_probe(
        fake_sglang.url, ps, ProbeSettings(max_tokens=MAX_TOKENS, repeats=1, warmup=0),
        adapter=get_adapter("sglang"), experiment=sglang_exp,
    )
    s = result.summary
    mode = fake_sglang._server.mode  # type: ignore[attr-defined]
    verify = verify_steps(MAX_TOKENS) * len(ps)
    completion = MAX_TOKENS * len(ps)
    if mode == "server_info":
        assert "server_info avg_spec_accept_length" in s["acceptance_source"]
        assert s["spec_decode_acceptance_length"] == AVG_ACCEPT_LENGTH
        assert s["spec_decode_acceptance_rate"] == pytest.approx(100 * (AVG_ACCEPT_LENGTH - 1) / k)
        assert "spec_decode_num_drafts" not in s
    else:
        expected = "native /generate" if mode == "native" else "OpenAI-route spec details"
        assert expected in s["acceptance_source"]
        assert s["spec_decode_acceptance_length"] == pytest.approx(completion / verify)
        assert s["spec_decode_num_drafts"] == verify
        assert s["spec_decode_accepted_tokens"] == completion - verify
        assert s["spec_decode_acceptance_rate"] == pytest.approx(100 * (completion - verify) / (verify * k))
    # The timed requests are plain streamed chat requests with usage, whatever the source.
    timed = [b for path, b in fake_sglang.bodies if path == "/v1/chat/completions" and b.get("stream")]
    assert timed and all(b["stream_options"] == {"include_usage": True} and b["temperature"] == 0 for b in timed)
    assert all(b["max_tokens"] == MAX_TOKENS for b in timed if b["messages"][0]["content"] != "Hi")


async def test_client_reads_chunks_and_usage() -> None:
    with FakeSglangServer("native") as server:
        result = await run_probe(server.url, prompts.builtin("math"), ProbeSettings(max_tokens=10, repeats=1, warmup=0))
    row = result.requests[0]
    assert row["ok"] and row["output_tokens"] == 10 and row["content_chunks"] == 10 / TOKENS_PER_STEP
    assert row["tokens_per_chunk"] == TOKENS_PER_STEP
    assert row["finish_reason"] == "length" and row["eos"] is False
    assert len(row["chunk_itl_ms"]) == 10 / TOKENS_PER_STEP  # role chunk first, then one gap per content chunk
    assert "spec_decode_acceptance_length" not in result.summary  # no adapter: acceptance not measured
    math = result.summary["per_category"]["math"]
    assert list(result.summary["per_category"]) == ["math"]
    assert math["requests"] == 2 and math["tokens_per_chunk"] == TOKENS_PER_STEP and math["eos_fraction"] == 0.0
    tpots = sorted(r["tpot_ms"] for r in result.requests)
    assert math["median_tpot_ms"] == pytest.approx(sum(tpots) / 2)
