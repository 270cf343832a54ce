"""Comparison rules: speedup with its noise band, refusals with reasons, verdicts, formats."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.engines.verdict.compare import HELPS_ABOVE, Speedup, build, engine_verdict, render, speed_words, speedup
from servelab.engines.errors import ServelabError


def probe(run: str, tput: float, mad: float = 0.0, *, engine: str = "vllm", method: str = "none", max_tokens: int = 64,
          prompts: str = "h1", model: str = "/m/kimi", acc_len: float | None = None) -> tuple[str, dict[str, Any]]:
    s: dict[str, Any] = {
        "output_throughput": tput,
        "max_tokens": max_tokens,
        "max_concurrency": 1,
        "prompt_set_hash": prompts,
        "model_id": "kimi",
        "repeats": 3,
        "stats": {"output_throughput": {"median": tput, "mad": mad, "n": 3, "unstable": mad > 0.1 * tput}},
        "unstable": ["output_throughput"] if mad > 0.1 * tput else [],
        "identity": {"engine": engine, "model": model, "spec_method": method, "host": "blackwell", "prompt_set_hash": prompts},
        "load_stages_s": {"weights": 1500.0, "ready": 2.0},
    }
    if acc_len is not None:
        s["spec_decode_acceptance_length"] = acc_len
        s["spec_decode_acceptance_rate"] = 15.0
        s["spec_decode_per_position_acceptance_rates"] = [0.3, 0.1, 0.05]
        s["per_category"] = {"coding": {"tokens_per_chunk": 1.8}, "translation": {"tokens_per_chunk": 1.1}}
    return run, s


BASE = probe("base-1", 100.0, 1.0)


@pytest.mark.parametrize(
    "tput, mad, expected",
    [
        (150.0, 1.0, "helps"),
        (66.0, 1.0, "hurts"),  # the Kimi-K2.5 EAGLE-3 case: 0.66x
        (105.0, 1.0, "inconclusive"),  # faster, but not by 10 %
        (118.0, 20.0, "inconclusive"),  # above 1.10x, but not beyond the noise band
        (97.0, 5.0, "inconclusive"),  # below 1.0x, but within the band
    ],
)
def test_speedup_rules(tput: float, mad: float, expected: str) -> None:
    run, s = probe("spec-1", tput, mad, method="eagle3")
    sp = speedup(s, BASE[1], BASE[0])
    assert sp.value == pytest.approx(tput / 100.0)
    assert sp.band is not None and sp.band >= 0
    assert sp.verdict == expected


@pytest.mark.parametrize(
    "kw, why",
    [
        ({"max_tokens": 128}, "different max_tokens (128 vs 64)"),
        ({"prompts": "h2"}, "different prompts (h2 vs h1)"),
        ({"model": "/m/other"}, "different model (/m/other vs /m/kimi)"),
    ],
)
def test_speedup_refused_across_different_settings(kw: dict[str, Any], why: str) -> None:
    _, s = probe("spec-1", 150.0, **kw)
    sp = speedup(s, BASE[1], BASE[0])
    assert sp.value is None and sp.verdict is None
    assert why in sp.reason and "base-1" in sp.reason
    comp = build([BASE, ("spec-1", s)], {"spec-1": sp})
    assert any("no verdict on speculation" in line and why in line for line in comp.verdict)


def test_verdict_states_rule_and_numbers() -> None:
    spec = probe("eagle3-1", 66.0, 1.0, method="eagle3", acc_len=1.45)
    comp = build([BASE, spec], {"eagle3-1": speedup(spec[1], BASE[1], BASE[0])})
    line = next(v for v in comp.verdict if v.startswith("eagle3-1"))
    assert "speculation HURTS vs base-1" in line and "0.66x" in line and "slower: even the band's high end is below 1.00x" in line
    assert "acceptance length 1.45" in line
    row = next(r for r in comp.rows if r.label == "speedup vs baseline")
    assert row.values[0] == "- (no baseline)" and row.values[1].startswith("0.66x")


def test_engine_switch_rule() -> None:
    vllm_spec = probe("vllm-eagle3", 66.0, 1.0, method="eagle3")
    sglang = probe("sglang-eagle3", 150.0, 2.0, engine="sglang", method="eagle3")
    lines = engine_verdict([BASE, vllm_spec, sglang])
    assert "best configuration is sglang-eagle3 (sglang)" in lines[0]
    assert "switching from vllm to sglang is WARRANTED" in lines[1]
    close = probe("sglang-eagle3", 104.0, 2.0, engine="sglang", method="eagle3")
    lines = engine_verdict([BASE, vllm_spec, close])
    assert "is NOT warranted" in lines[1]
    other_prompts = probe("sglang-eagle3", 150.0, engine="sglang", prompts="h9")
    assert "no verdict across engines" in engine_verdict([BASE, other_prompts])[0]
    assert engine_verdict([BASE, vllm_spec]) == []  # one engine: nothing to switch


def test_formats_and_diff_only() -> None:
    spec = probe("spec-1", 150.0, 1.0, method="ngram", acc_len=2.5)
    comp = build([BASE, spec], {"spec-1": speedup(spec[1], BASE[1], BASE[0])})
    data = json.loads(render(comp, "json"))
    assert data["runs"] == ["base-1", "spec-1"] and data["speedups"]["spec-1"]["verdict"] == "helps"
    labels = {r["label"] for r in data["rows"]}
    assert {"output tok/s", "acceptance length", "per-position acceptance", "load: weights (s)", "host"} <= labels
    coding = next(r for r in data["rows"] if r["label"] == "tokens/chunk: coding")
    assert coding["values"] == {"base-1": "-", "spec-1": "1.80"}
    diff = {r["label"] for r in json.loads(render(comp, "json", diff_only=True))["rows"] if r["kind"] == "identity"}
    assert diff == {"spec method"}
    rows = list(csv.reader(io.StringIO(render(comp, "csv"))))
    assert rows[0] == ["row", "base-1", "spec-1"] and rows[-1][0] == "verdict"
    md = render(comp, "markdown")
    assert md.startswith("| | base-1 | spec-1 |") and "**Verdict**" in md
    table = render(comp, "table")
    assert "speedup vs baseline" in table and "1.50x" in table and "Verdict:" in table
    with pytest.raises(ServelabError, match="unknown format"):
        render(comp, "yaml")


def test_unstable_figures_are_flagged() -> None:
    noisy = probe("spec-1", 150.0, 40.0, method="ngram")
    comp = build([BASE, noisy], {"spec-1": Speedup(None, reason="refused: x")})
    row = next(r for r in comp.rows if r.label == "output tok/s")
    assert row.values[1] == "150.0 ±40.0 (unstable)"
    comp = build([BASE, noisy], {"spec-1": speedup(noisy[1], BASE[1], BASE[0])})
    assert any("unstable" in line and "repeat the probe" in line for line in comp.verdict)


@pytest.mark.parametrize(
    "peaks, shown, best",
    [
        ({"0": 12409}, "12409", 1),  # one GPU
        ({"0": 70000, "1": 70000}, "140000", 0),  # summed over the run's GPUs: TP=2 holds twice the memory
        ({}, "-", None),  # a CPU host: not sampled, not 0
        ({"0": "x"}, "-", None),  # a broken record
    ],
)
def test_peak_gpu_memory_is_a_figure_to_weigh(peaks: dict[str, Any], shown: str, best: int | None) -> None:
    base = probe("base-1", 100.0, 1.0)
    base[1]["identity"]["gpu_peak_mib"] = {"0": 80000}
    spec = probe("spec-1", 150.0, 1.0, method="ngram", acc_len=2.5)
    spec[1]["identity"]["gpu_peak_mib"] = peaks
    comp = build([base, spec], {})
    row = next(r for r in comp.rows if r.label == "peak GPU memory, all GPUs (MiB)")
    assert row.values == ["80000", shown] and row.better == "lower"
    assert row.best() == best


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["speculative", "engine_args", "probe", "bold", "red", "/", "link=x"]), min_size=1, max_size=3),
       st.text(alphabet="abc =\"0123", max_size=12))
def test_the_table_keeps_bracketed_advice_as_written(sections: list[str], tail: str) -> None:
    """Advice names config sections (``[speculative] num_tokens = 2``): the table prints them verbatim,
    as the JSON does, never as markup (a ``[bold]`` or ``[/]`` of a log line included)."""
    spec = probe("spec-1", 150.0, 1.0, method="ngram", acc_len=2.5)
    comp = build([BASE, spec], {"spec-1": speedup(spec[1], BASE[1], BASE[0])})
    advice = "next: " + "; ".join(f"[{s}] key{tail}" for s in sections)
    comp = dataclasses.replace(comp, verdict=[*comp.verdict, advice])
    table = render(comp, "table")
    assert advice in json.loads(render(comp, "json"))["verdict"]
    assert " ".join(advice.split()) in " ".join(table.split())


def test_both_fingerprints_are_identity_rows() -> None:
    a, b = probe("spec-1", 150.0, method="eagle3"), probe("spec-2", 150.0, method="eagle3")
    a[1]["identity"].update(target_fingerprint="aaaa1111", drafter_fingerprint="d00d")
    b[1]["identity"].update(target_fingerprint="bbbb2222", drafter_fingerprint="d00d")
    comp = build([a, b], {})
    rows = {r.label: r.values for r in comp.rows}
    assert rows["target weights"] == ["aaaa1111", "bbbb2222"] and rows["drafter weights"] == ["d00d", "d00d"]
    diff = {r["label"] for r in json.loads(render(comp, "json", diff_only=True))["rows"] if r["kind"] == "identity"}
    assert "target weights" in diff and "drafter weights" not in diff


@given(st.floats(0.2, 3.0), st.floats(0.0, 0.8))
def test_speed_words_match_the_verdict_without_a_double_negative(value: float, band: float) -> None:
    sp = Speedup(value, band, "b")
    words = speed_words(value, value - band, value + band)
    assert "neither" not in words and " nor " not in words and "beyond" not in words
    assert words.startswith({"helps": "faster:", "hurts": "slower:"}.get(str(sp.verdict), ("faster,", "faster by", "slower,", "about as fast")))  # type: ignore[arg-type]
    if sp.verdict == "inconclusive" and value >= HELPS_ABOVE:
        assert words == f"faster, but the band reaches below the {HELPS_ABOVE:.2f}x that would call it a gain"


def test_the_issue_example_reads_as_one_sentence_wrapped_at_80_columns() -> None:
    spec = probe("tiny-cpu-vllm-ngram-20261206-014300-abcd", 124.0, 10.0, method="ngram")
    comp = build([BASE, spec], {spec[0]: speedup(spec[1], BASE[1], BASE[0])})
    line = next(v for v in comp.verdict if v.startswith(spec[0]))
    # by hand: 124/100 = 1.24; band 1.4826 x sqrt((10/124)^2 + (1/100)^2) x 1.24 = 0.149
    assert "INCONCLUSIVE" in line and "1.24x (noise band 1.09-1.39x); faster, but the band reaches below the 1.10x" in line
    table = render(comp, "table", width=80)
    tail = table.split("Verdict:\n", 1)[1].splitlines()
    assert all(len(t) <= 80 for t in tail) and len(tail) > len(comp.verdict)  # wrapped, not cut
    assert " ".join(t.strip().removeprefix("- ") for t in tail) == " ".join(comp.verdict)  # every word kept, in order
