"""The paired measurement's arithmetic (per-pair ratios, their interval, the A B B A order), its file,
and how compare puts it beside the unpaired verdict. The real servers: tests/test_ab_engine.py."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab.engines.verdict.compare import build, speedup
from servelab.engines.probe.conditions import RoundConditions
from servelab.engines.probe.paired import BUSY_QUEUE, INTERLEAVED, PairedResult, PairedRound, abba, from_dict, ratio_interval


def test_abba_order() -> None:
    assert "".join(abba(4)) == "ABBAABBA"


def test_interval_by_hand() -> None:
    # logs of 1.1, 1.2, 1.3: mean 0.18000, sd 0.08355; t(2) = 4.303; half = 4.303 x 0.08355 / sqrt 3 = 0.20757
    value, low, high = ratio_interval([1.1, 1.2, 1.3])
    assert value == pytest.approx(math.exp(0.18000), abs=1e-4)
    assert low == pytest.approx(math.exp(0.18000 - 0.20757), abs=1e-3) and high == pytest.approx(math.exp(0.18000 + 0.20757), abs=1e-3)
    assert ratio_interval([1.5]) == pytest.approx((1.5, 1.5, 1.5))


@given(st.lists(st.floats(0.2, 5.0), min_size=2, max_size=20), st.floats(0.5, 2.0))
def test_interval_holds_the_geometric_mean_and_scales_with_the_ratios(ratios: list[float], factor: float) -> None:
    value, low, high = ratio_interval(ratios)
    assert low <= value <= high
    v2, l2, h2 = ratio_interval([r * factor for r in ratios])  # a candidate uniformly faster: the same band, scaled
    assert v2 == pytest.approx(value * factor) and l2 == pytest.approx(low * factor) and h2 == pytest.approx(high * factor)


def paired(ratios: list[float], base: str = "base-1", cand: str = "spec-1") -> PairedResult:
    rounds = [PairedRound(i, o, 100.0, 100.0 * r, 0.0, 1.0, RoundConditions(load1=1.0), RoundConditions(load1=1.0))
              for i, (o, r) in enumerate(zip(abba(len(ratios)), ratios, strict=True))]
    return PairedResult(base, cand, INTERLEAVED, "local", "builtin:mixed", "h1", 64, 1, rounds, "20261206-020000")


def test_the_file_reads_back_and_the_line_says_how_it_was_measured() -> None:
    p = paired([1.15, 1.2, 1.18, 1.22])
    back = from_dict(json.loads(json.dumps(p.to_dict())))
    assert back == p and back.verdict == "helps"
    line = p.line("faster")
    assert line.startswith("spec-1: PAIRED HELPS vs base-1: speedup 1.19x (")
    assert "95% interval of 4 per-pair ratios" in line and "4 pairs interleaved A B B A on local" in line
    with pytest.raises(ValueError):
        from_dict({"format": "other"})


@given(st.lists(st.tuples(st.floats(0.0, 40.0), st.floats(0.0, 40.0)), min_size=1, max_size=8), st.integers(1, 16))
def test_the_line_names_a_busy_host_exactly_when_the_median_queue_reaches_twice_its_cpus(queues: list[tuple[float, float]], cpus: int) -> None:
    rounds = [PairedRound(i, o, 100.0, 110.0, 0.0, 1.0, RoundConditions(runnable=a, cpus=cpus), RoundConditions(runnable=b, cpus=cpus))
              for i, (o, (a, b)) in enumerate(zip(abba(len(queues)), queues, strict=True))]
    p = PairedResult("base-1", "spec-1", INTERLEAVED, "local", "builtin:mixed", "h1", 64, 1, rounds, "20261206-020000")
    sides = sorted(q for pair in queues for q in pair)
    median = (sides[len(sides) // 2 - 1] + sides[len(sides) // 2]) / 2  # an even count: two sides a round
    line = p.line("faster")
    if median >= BUSY_QUEUE * cpus:
        assert f"on local; host busy: a median {median:.1f} tasks wanted its {cpus} CPU" in line
    else:
        assert "host busy" not in line and line.endswith("on local")
    unknown = PairedResult(**{**p.__dict__, "rounds": [PairedRound(i, o, 100.0, 110.0, 0.0, 1.0, RoundConditions(), RoundConditions())
                                                        for i, o in enumerate(abba(len(queues)))]})
    assert "host busy" not in unknown.line("faster")  # nothing recorded: nothing claimed


def probe(run: str, tput: float, date: str, load: float) -> tuple[str, dict[str, object]]:
    return run, {
        "output_throughput": tput, "max_tokens": 64, "max_concurrency": 1, "prompt_set_hash": "h1", "model_id": "m", "repeats": 3,
        "date": date, "stats": {"output_throughput": {"median": tput, "mad": 1.0, "n": 3, "unstable": False}},
        "host_conditions": [{"load1": load, "other_cores": load / 2, "cpus": 2}] * 3, "host_load1": load,
        "identity": {"engine": "vllm", "model": "/m", "host": "local"},
    }


def test_compare_names_the_gap_offers_the_pair_and_shows_the_paired_verdict_beside() -> None:
    base, spec = probe("base-1", 100.0, "20261206-012900", 0.5), probe("spec-1", 124.0, "20261206-014300", 2.1)
    sp = speedup(spec[1], base[1], "base-1")
    assert sp.gap.startswith("probed 14 min apart; host load 0.5 against 2.1")
    line = next(v for v in build([base, spec], {"spec-1": sp}).verdict if v.startswith("spec-1"))
    assert "UNPAIRED: probed 14 min apart; host load 0.5 against 2.1" in line and "servelab ab base-1 spec-1" in line
    from dataclasses import replace

    lines = build([base, spec], {"spec-1": replace(sp, paired=paired([1.1, 1.12, 1.09, 1.11]))}).verdict
    mine = [v for v in lines if v.startswith("spec-1")]
    assert "unpaired probes: probed 14 min apart" in mine[0] and mine[1].startswith("spec-1: PAIRED INCONCLUSIVE vs base-1: speedup 1.10x")
    row = next(r for r in build([base, spec], {}).rows if r.label == "host load, 1 min")
    assert row.values == ["0.5", "2.1"]
