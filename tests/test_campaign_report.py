"""``servelab campaign report``: figures from the supervisor's records, with the probe's own rules."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import time

from engines.campaign import control
from engines.campaign.report import PointRow, _acceptance, build_report, recommend, render
from engines.catalog import load_catalog
from engines.experiment import Experiment
from engines.probe.prompts import builtin
from tests.fixtures.campaignlab import two_load_campaign
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
    report = await build_report(load_catalog(lab.folder), "sweep")
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
