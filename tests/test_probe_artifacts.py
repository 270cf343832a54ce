"""Load-stage timing from the analyzer's log timestamps, the identity block, and refusing dead runs."""

from __future__ import annotations

import asyncio

import pytest

from servelab.engines.catalog.folder import load_catalog
from servelab.engines.errors import ServelabError
from servelab.engines.probe.artifacts import identity, load_stages_s, probe_run, probe_when_ready, wait_for_ready
from servelab.engines.runs.records import RunRecord
from tests.conftest import EXPERIMENTS


def test_stage_seconds_from_log_timestamps() -> None:
    analysis = {
        "stages": [
            {"name": "weights", "started_at": "11-29 11:08:09", "ended_at": "11-29 11:33:10"},
            {"name": "compile", "started_at": "2026-11-29 11:33:10.123", "ended_at": "2026-11-29 11:33:40,500"},
            {"name": "kv_cache", "started_at": "11-29 11:33:40", "ended_at": None},  # still running
            {"name": "warmup", "started_at": "garbage", "ended_at": "11-29 11:34:00"},
        ]
    }
    assert load_stages_s(analysis) == {"weights": 1501.0, "compile": 30.0}
    assert load_stages_s({}) == {}


def test_identity_names_what_must_match() -> None:
    exp = load_catalog(EXPERIMENTS).get("kimi-k25-vllm-eagle3").experiment
    rec = RunRecord(
        id="kimi-k25-vllm-eagle3-20261129-110000-abcd", experiment=exp.name, engine="vllm", host="blackwell",
        argv=[], env={}, port=8000, model=exp.model, run_dir="/d", log_path="/d/engine.log",
        patch_hashes={"patches/a.diff": "0" * 64}, identity="abc123",
    )
    ident = identity(exp, rec, ["NVIDIA RTX PRO 6000 Blackwell"] * 8)
    assert ident["engine"] == "vllm" and ident["spec_method"] == "eagle3"
    assert ident["drafter"] == exp.speculative.draft_model and ident["num_speculative_tokens"] == exp.speculative.num_tokens
    assert ident["tensor_parallel"] == exp.parallel.tensor
    assert ident["patch_hashes"] == {"patches/a.diff": "0" * 64}
    assert ident["gpus"] == ["NVIDIA RTX PRO 6000 Blackwell"] * 8 and ident["host"] == "blackwell"


async def test_a_run_that_dies_is_never_probed(lab) -> None:  # type: ignore[no-untyped-def]
    """The StubEngine (a real process) exits with code 3 before it is ready: one clean line each."""
    lab.experiment("dies", env={"STUB_LINES": "5", "STUB_EXIT": "3"})
    runs = lab.runs()
    rec = await runs.launch("dies", skip_preflight=True)
    for _ in range(200):
        if not (await runs.status(rec.id, analyze=False)).alive:
            break
        await asyncio.sleep(0.05)
    with pytest.raises(ServelabError, match=f"run {rec.id} ended before it was ready") as info:
        await wait_for_ready(runs, rec.id, poll_s=0.05)
    assert "\n" not in str(info.value)
    with pytest.raises(ServelabError, match="is not running"):
        await probe_run(runs, rec.id)
    with pytest.raises(ServelabError, match="ended before it was ready"):
        await probe_when_ready(runs, rec.id)
    assert await runs.read_artifact(rec.id, "probe.json") is None
