"""``servelab campaign report``: figures from the supervisor's records, with the probe's own rules."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import shlex
import subprocess
import time

import pytest

from servelab.engines.campaign import control
from servelab.engines.campaign.report import PointRow, _acceptance, batch_size_tables, best_k_per_concurrency, build_report, recommend, render
from servelab.engines.runs.manager import Runs
from servelab.engines.catalog.folder import load_catalog
from servelab.engines.catalog.experiment import Experiment
from servelab.engines.probe.prompts import builtin
from servelab.engines.adapters.vllm import batch_size_ranges
from servelab.engines.adapters.sglang import SPEC_COUNTERS
from tests.conftest import ENGINE_PYTHON, SGLANG_PYTHON, need_engine, need_sglang
from tests.fixtures.campaignlab import FULL_SWEEP, recorded_campaign, two_load_campaign
from tests.fixtures.runlab import Lab

VLLM_BEFORE = """# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0"} 10
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{engine="0"} 20
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{engine="0"} 5
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 4
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="1"} 1
"""


def _after(drafts: int, tokens: int, accepted: int, pos0: int, pos1: int) -> str:
    return (
        VLLM_BEFORE.replace("} 10", f"}} {10 + drafts}").replace("} 20", f"}} {20 + tokens}").replace("} 5\n", f"}} {5 + accepted}\n")
        .replace('"0"} 4', f'"0"}} {4 + pos0}').replace('"1"} 1', f'"1"}} {1 + pos1}')
    )


async def test_acceptance_is_the_adapters_window_over_the_recorded_metrics() -> None:
    exp = Experiment.model_validate({"name": "x", "engine": "vllm", "model": "m", "speculative": {"method": "ngram", "num_tokens": 2, "prompt_lookup_max": 3}})
    rep = {"metrics_before": VLLM_BEFORE, "metrics_after": _after(100, 200, 120, 70, 50)}
    acc = await _acceptance(exp, builtin(), 8, rep, [])
    assert acc is not None and acc.rate == 0.6 and acc.length == 2.2 and acc.per_position == [0.7, 0.5]
    assert await _acceptance(exp, builtin(), 8, {"metrics_before": None, "metrics_after": None}, []) is None  # not recorded: absent
    base = exp.model_copy(update={"speculative": exp.speculative.model_copy(update={"method": "none"})})
    assert await _acceptance(base, builtin(), 8, rep, []) is None


def _row(k: int | None, speedup: float | None, band: float | None, length: float | None, tpot: float | None) -> PointRow:
    return PointRow(f"p{k}", 0, "vllm", f"K={k}", "done", None, None, speedup=speedup, speedup_band=band, acceptance_length=length, tpot_ms=tpot, k=k, concurrency=1)


def test_recommendation_names_the_best_speedup_and_what_the_next_k_adds() -> None:
    rows = [_row(None, None, None, None, 10.0), _row(2, 1.40, 0.05, 2.1, 12.0), _row(4, 1.30, 0.05, 2.3, 13.8)]
    assert recommend(rows) == "vllm K=2: 1.40x ±0.05 over baseline; K=4 adds +0.20 tokens per step for +15% time per output token"
    noisy = [_row(2, 1.02, 0.05, 1.2, 12.0)]
    assert "within the noise band" in str(recommend(noisy))
    assert recommend([_row(None, None, None, None, 10.0)]) is None


async def test_report_of_a_finished_campaign_in_every_format(lab: Lab) -> None:
    two_load_campaign(lab)
    st = await control.start(load_catalog(lab.folder), "sweep", skip_preflight=True)
    t0 = time.monotonic()
    while (await control.status(load_catalog(lab.folder), st.id)).status != "done":
        assert time.monotonic() - t0 < 120
        await asyncio.sleep(0.2)
    report = await build_report(Runs(load_catalog(lab.folder)), "sweep")
    assert report.id == st.id and report.status == "done" and len(report.rows) == 4
    base = [r for r in report.rows if r.k is None]
    spec = [r for r in report.rows if r.k is not None]
    assert len(base) == 2 and len(spec) == 2
    for r in report.rows:
        assert r.status == "done" and r.output_tps and r.output_tps > 0 and r.output_tps_band is not None
        assert r.ttft_ms is not None and r.tpot_ms is not None and r.load_s is not None and r.load_s >= 0
        assert r.acceptance_rate is None  # the StubEngine exposes no spec-decode counters: absent, not 0
    assert all(r.speedup is None for r in base)
    for r in spec:  # each against the baseline point with the same concurrency
        pair = next(b for b in base if b.point == r.baseline_point)
        assert pair.concurrency == r.concurrency and r.speedup == (r.output_tps or 0) / (pair.output_tps or 1)
    data = json.loads(render(report, "json"))
    assert [p["point"] for p in data["points"]] == [r.point for r in report.rows]
    rows = list(csv.reader(io.StringIO(render(report, "csv"))))
    assert rows[0][0] == "point" and len(rows) == 5 and all(len(r) == len(rows[0]) for r in rows)
    md = render(report, "markdown").splitlines()
    assert md[2].startswith("| point |") and len([ln for ln in md if ln.startswith("| vllm")]) == 4
    table = render(report, "table").splitlines()
    assert table[0] == f"campaign {st.id}: done" and len(table) >= 6


# -- the per-batch-size K table ---------------------------------------------------------------------
def _spec_row(k: int, c: int, speedup: float, engine: str = "vllm") -> PointRow:
    return PointRow(f"p{k}-{c}", {2: 1, 4: 2}[k], engine, f"K={k}", "done", None, f"b{c}", speedup=speedup, k=k, concurrency=c, method="ngram")


def test_best_k_per_concurrency_is_the_best_speedup_or_none_when_nothing_beats_the_baseline() -> None:
    rows = [_spec_row(2, 1, 1.30), _spec_row(4, 1, 1.50), _spec_row(2, 4, 1.10), _spec_row(4, 4, 0.90), _spec_row(2, 16, 0.8), _spec_row(4, 16, 0.7)]
    assert best_k_per_concurrency(rows) == {("vllm", "ngram"): [(1, 4), (4, 2), (16, 0)]}
    assert best_k_per_concurrency([_spec_row(2, 1, 1.3), _spec_row(4, 1, 1.5)]) == {}  # one concurrency: no table


def test_vllm_table_is_its_speculative_config_with_inclusive_ranges() -> None:
    assert batch_size_ranges([(1, 4), (4, 2), (16, 0)]) == [[1, 3, 4], [4, 15, 2], [16, 16, 0]]
    assert batch_size_ranges([(2, 3), (8, 3), (32, 1)]) == [[1, 31, 3], [32, 32, 1]]  # from 1; equal neighbours merge
    rows = [_spec_row(2, 1, 1.30), _spec_row(4, 1, 1.50), _spec_row(2, 4, 1.10), _spec_row(4, 4, 0.90)]
    exp = Experiment.model_validate({"name": "x", "engine": "vllm", "model": "m", "speculative": {"method": "ngram", "num_tokens": 2, "prompt_lookup_max": 3}})
    (table,) = batch_size_tables(rows, {1: exp, 2: exp})
    assert table.best_k == ((1, 4), (4, 2)) and table.flags is not None
    flag, value = shlex.split(table.flags)
    assert flag == "--speculative-config"
    assert json.loads(value) == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "num_speculative_tokens_per_batch_size": [[1, 3, 4], [4, 4, 2]]}
    assert table.line() == f"vllm ngram best K by concurrency (c=1: K=4, c=4: K=2): {table.flags}"
    slow = batch_size_tables([_spec_row(2, 1, 0.5), _spec_row(2, 4, 0.8)], {1: exp})
    assert slow[0].flags is None and "no K beat the baseline at any measured concurrency" in slow[0].line()
    sgl = exp.model_copy(update={"engine": "sglang"})
    (other,) = batch_size_tables([_spec_row(2, 1, 1.3, "sglang"), _spec_row(2, 4, 1.2, "sglang")], {1: sgl})
    assert other.flags is None and other.line().endswith("(sglang has no per-batch-size K setting)")


@pytest.mark.engine
def test_installed_vllm_accepts_the_table_and_picks_each_k() -> None:
    """vLLM's own schedule validator and lookup (vllm/v1/spec_decode/dynamic/utils.py, loaded alone) read our table."""
    need_engine()
    table = batch_size_ranges([(1, 4), (4, 2), (16, 0)])
    script = (
        "import importlib.util, json, pathlib, sys\n"
        "root = pathlib.Path(importlib.util.find_spec('vllm').submodule_search_locations[0])\n"
        "spec = importlib.util.spec_from_file_location('dsd', root / 'v1/spec_decode/dynamic/utils.py')\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "t = json.loads(sys.argv[1])\n"
        "m.validate_and_normalize_dynamic_sd_schedule(t)\n"
        "look = m.build_dynamic_sd_schedule_lookup(t, 20, 4)\n"
        "print(json.dumps(look[1:]))\n"
    )
    out = subprocess.run([str(ENGINE_PYTHON), "-c", script, json.dumps(table)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [4] * 3 + [2] * 12 + [0] * 5  # batch sizes 1..20
    bad = subprocess.run([str(ENGINE_PYTHON), "-c", script, json.dumps([[2, 3, 4]])], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "must start at 1" in bad.stderr  # the validator is real: it refuses a table not from 1


async def test_recorded_real_campaign_says_no_k_beat_the_baseline(lab: Lab) -> None:
    """On this CPU n-gram K=2 and K=4 are slower than the baseline at concurrency 1 and 4 (real records)."""
    report = await build_report(Runs(load_catalog(lab.folder)), recorded_campaign(lab, FULL_SWEEP))
    spec = sorted((r for r in report.rows if r.k is not None and r.status == "done"), key=lambda r: r.concurrency or 0)
    assert [r.concurrency for r in spec] == [1, 1, 4, 4] and all(r.speedup is not None and r.speedup < 1.0 for r in spec)
    (table,) = report.batch_size_tables
    assert table.best_k == ((1, 0), (4, 0)) and table.flags is None
    assert f"per batch size: {table.line()}" in render(report, "table").splitlines()
    assert json.loads(render(report, "json"))["batch_size_tables"][0]["best_k"] == [[1, 0], [4, 0]]
    crashed = [r for r in report.rows if r.status == "failed"]
    assert len(crashed) == 2 and all(r.error is not None for r in crashed)
    for r in crashed:  # the supervisor knew the exit code; the report adds the run log's root cause
        assert r.error is not None and r.error.startswith("load 4 crashed: engine exited with code 1")
        assert "root cause: ValueError: Available memory on node" in r.error and "kv-cache-memory-bytes" in r.error


# -- SGLang acceptance from the recorded /metrics -----------------------------------------------------
def _sglang_metrics(generated: float, verified: float) -> str:
    """/metrics as SGLang 0.5.23 writes it (prometheus_client, its metric names and labels), after
    ``generated`` completion tokens over ``verified`` verify steps in finished requests."""
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    reg = CollectorRegistry()
    gen = Counter("sglang:generation_tokens", "Number of generation tokens processed.", ["model_name", "is_streaming"], registry=reg)
    ver = Counter("sglang:spec_verify_calls", "Number of speculative decoding verification calls.", ["model_name"], registry=reg)
    gen.labels(model_name="tiny", is_streaming="true").inc(generated * 0.75)
    gen.labels(model_name="tiny", is_streaming="false").inc(generated * 0.25)
    if verified:
        ver.labels(model_name="tiny").inc(verified)
    return generate_latest(reg).decode()


async def test_sglang_acceptance_is_replayed_from_its_metrics_counters() -> None:
    exp = Experiment.model_validate({"name": "s", "engine": "sglang", "model": "m", "speculative": {"method": "eagle3", "num_tokens": 3, "draft_model": "d"}})
    rep = {"metrics_before": _sglang_metrics(100, 40), "metrics_after": _sglang_metrics(100 + 300, 40 + 100)}
    acc = await _acceptance(exp, builtin(), 8, rep, [])
    assert acc is not None and "spec_verify_calls" in acc.source
    assert acc.length == 3.0 and acc.drafts == 100 and acc.draft_tokens == 300 and acc.accepted == 200  # K=3: 3 drafted per verify step
    assert acc.rate is not None and abs(acc.rate - 2 / 3) < 1e-9
    quiet = {"metrics_before": _sglang_metrics(100, 0), "metrics_after": _sglang_metrics(400, 0)}  # generated, never verified
    assert await _acceptance(exp, builtin(), 8, quiet, []) is None  # no speculation seen: absent, not 0
    assert await _acceptance(exp, builtin(), 8, {"metrics_before": None, "metrics_after": None}, []) is None  # --enable-metrics off


def test_the_counters_are_the_installed_sglangs_own() -> None:
    """The names and the per-request increments come from the installed SGLang (read, not imported)."""
    need_sglang()
    (root,) = SGLANG_PYTHON.parent.parent.glob("lib/python3*/site-packages/sglang")
    collector = (root / "srt/observability/metrics_collector.py").read_text()
    for name in SPEC_COUNTERS:
        assert f'name="{name}_total"' in collector
    assert "self.generation_tokens_total.labels(**stream_labels).inc(generation_tokens)" in collector
    assert "self.spec_verify_calls_total.labels(**labels).inc(spec_verify_ct)" in collector
