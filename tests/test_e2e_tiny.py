"""End to end on a real vLLM: launch the two tiny experiments through Runs, watch them reach ready
through the log analyzer, probe both, compare them (library and command line), stop them, and
check that no process of theirs is left."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from contextlib import aclosing
from pathlib import Path

import pytest

from servelab.engines.adapters.base import get_adapter
from servelab.engines.catalog.folder import load_catalog
from servelab.engines.verdict.compare import compare_runs, render
from servelab.engines.hosts.registry import close_all
from servelab.engines.logs.analyzer import LogAnalyzer
from servelab.engines.probe.artifacts import PROBE_JSON, REQUESTS_JSONL, load_probe, probe_when_ready
from servelab.engines.runs.manager import Runs
from tests.conftest import REPO, need_engine
from tests.fixtures.tinyfolder import BASELINE, NGRAM, make_folder
from tests.fixtures.procs import marked

pytestmark = pytest.mark.engine
READY_TIMEOUT_S = 480.0


async def watch_until_ready(runs: Runs, run_id: str) -> list[str]:
    """Feed the engine log to the analyzer until it says ready; the stages it saw done."""
    analyzer = LogAnalyzer(get_adapter("vllm").grammar)  # type: ignore[attr-defined]
    async with aclosing(runs.follow(run_id)) as chunks:
        async for _offset, chunk in chunks:
            analyzer.feed(chunk)
            snap = analyzer.snapshot()
            if snap.state == "ready":
                return [s.name for s in snap.stages if s.status == "done"]
            assert snap.state not in ("crashed", "exited"), f"{run_id}: {snap.state}: {snap.root_cause}"
    raise AssertionError(f"{run_id}: log ended before ready")


def run_processes(run_ids: set[str]) -> list[int]:
    """Live processes carrying one of these runs' SERVELAB_RUN_ID marker."""
    return [pid for pid, _ppid, _title in marked(run_ids)]


def test_tiny_baseline_vs_ngram(tmp_path: Path) -> None:
    need_engine()
    folder = make_folder(tmp_path)
    launched: list[str] = []

    async def lifecycle() -> tuple[dict, dict, str]:
        runs = Runs(load_catalog(folder))
        try:
            recs = await asyncio.gather(runs.launch(BASELINE), runs.launch(NGRAM))
            launched.extend(r.id for r in recs)
            base_id, ngram_id = launched
            done = await asyncio.wait_for(asyncio.gather(*(watch_until_ready(runs, i) for i in launched)), READY_TIMEOUT_S)
            for stages in done:
                assert {"weights", "ready"} <= set(stages), stages
            # One at a time: two probes at once would share the two cores and skew the speedup.
            # The baseline the way a launch does it: [probe] auto, after the analysis says ready.
            assert await probe_when_ready(runs, base_id) is not None
            # The n-gram run through the command line, as an operator would.
            cli = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "servelab.tui.cli", "--dir", str(folder), "probe", ngram_id,
                cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(cli.communicate(), 600)
            assert cli.returncode == 0, err.decode()
            assert "acceptance length" in out.decode() and "per-position" in out.decode(), out.decode()
            base, ngram = await load_probe(runs, base_id), await load_probe(runs, ngram_id)
            assert base is not None and ngram is not None
            requests = await runs.read_artifact(ngram_id, REQUESTS_JSONL)
            assert requests is not None and len(requests.decode().splitlines()) == ngram["num_prompts"] * ngram["repeats"]
            table = render(await compare_runs(runs, [base_id, ngram_id]), "table")
            return base, ngram, table
        finally:
            await close_all()

    async def stop_all() -> None:
        runs = Runs(load_catalog(folder))
        try:
            for run_id in launched:
                st = await runs.stop(run_id, grace=20)
                assert not st.alive
        finally:
            await close_all()

    try:
        base, ngram, table = asyncio.run(lifecycle())

        # Real acceptance figures from vLLM's counters.
        rate = ngram["spec_decode_acceptance_rate"] / 100
        assert 0 < rate <= 1
        assert ngram["spec_decode_acceptance_length"] > 1
        for rep in ngram["per_repeat"]:
            assert rep["spec_decode_acceptance_length"] == pytest.approx(1 + rep["spec_decode_accepted_tokens"] / rep["spec_decode_num_drafts"])
            per = rep["spec_decode_per_position_acceptance_rates"]
            assert all(b <= a + 0.05 for a, b in zip(per, per[1:], strict=False)), per
        assert "spec_decode_acceptance_rate" not in base  # no speculation, no acceptance
        assert base["prompt_set_hash"] == ngram["prompt_set_hash"]
        assert ngram["load_stages_s"], "load stages should be timed from the log"
        # "load" is start to ready: the process start the supervisor stamped, gaps between stages included.
        assert ngram["load_s"] >= sum(ngram["load_stages_s"].values())

        # The comparison: a speedup against the baseline and a verdict with its reason.
        assert "speedup vs baseline" in table and "Verdict:" in table
        assert re.search(r"speculation (HELPS|HURTS|INCONCLUSIVE) vs .*noise band", " ".join(table.split())), table  # the verdict wraps at the terminal's width

        # The same through the command line, from the run folders.
        cli = subprocess.run(
            [sys.executable, "-m", "servelab.tui.cli", "--dir", str(folder), "compare", *launched, "--format", "json"],
            capture_output=True, text=True, cwd=REPO, timeout=120,
        )
        assert cli.returncode == 0, cli.stderr
        data = json.loads(cli.stdout)
        sp = data["speedups"][launched[1]]
        assert sp["baseline_run"] == launched[0]
        assert sp["value"] == pytest.approx(ngram["output_throughput"] / base["output_throughput"])
        assert sp["verdict"] in ("helps", "hurts", "inconclusive")
        assert any(line.startswith(launched[1]) for line in data["verdict"])
    finally:
        if launched:
            asyncio.run(stop_all())
    assert run_processes(set(launched)) == []
    for run_id in launched:
        assert (tmp_path / "work" / "runs" / run_id / PROBE_JSON).is_file()
