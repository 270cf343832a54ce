"""Figures that agree (issue #22): load is start to ready everywhere, accept is the rate with its
length beside it, every estimate is said by one function, and a verdict cannot contradict itself."""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable

from servelab.engines.campaign.check import load_checked
from servelab.engines.campaign.plan import describe, estimate_text, plan
from servelab.engines.catalog.folder import load_catalog
from servelab.engines.verdict.compare import METRIC_ROWS, Speedup, build, compare_runs, render, speedup, unstable_note
from servelab.engines.diagnosis.model import Arm, Diagnosis, Finding, Measurements, ReferenceMatch, StepCost
from servelab.engines.diagnosis.reference import closest
from servelab.engines.diagnosis.report import arm_line
from servelab.engines.diagnosis.rules import RunFacts, diagnose
from servelab.engines.diagnosis.stored import DIAGNOSIS_JSON
from servelab.engines.diagnosis.verdict import NOT_MEANINGFUL, verdict_line
from servelab.engines.runs.loadtime import load_seconds, load_text
from servelab.engines.logs.files import analyze_file
from servelab.engines.logs.analysis import Analysis, parse_log_time, stage_seconds
from servelab.engines.probe.artifacts import load_stages_s
from servelab.engines.runs.manager import Runs
from servelab.engines.runs.state import StageState
from servelab.tui.app import ServelabApp
from servelab.tui.widgets.campaign_view import plan_renderable
from tests.fixtures.tui import SHARED_LOGS, TuiFolder, screen_text, wait_for

DATA_LOGS = Path(__file__).parent / "data" / "logs"
NGRAM_SERVE = SHARED_LOGS / "vllm-cpu-ngram-startup-and-serve.log"


def _ready_logs() -> list[tuple[Path, Analysis]]:
    found = []
    for path in sorted([*DATA_LOGS.glob("*.log"), *SHARED_LOGS.glob("*.log")]):
        analysis = analyze_file(path)
        if load_seconds(analysis, None) is not None:
            found.append((path, analysis))
    return found


def _bars(analysis: Analysis) -> float:
    """The sum of the stage bars: what the list used to call "load"."""
    return sum(stage_seconds(s) or 0.0 for s in analysis.stages if s.status == StageState.DONE)


# -- load means start to ready ----------------------------------------------------------------------
def test_load_is_start_to_ready_for_every_recorded_log() -> None:
    logs = _ready_logs()
    assert len(logs) >= 4
    gapped = 0
    for path, analysis in logs:
        load = load_seconds(analysis, None)
        assert load is not None and load >= _bars(analysis) - 1e-9, path.name
        gapped += load > _bars(analysis)
        # What the probe keeps is what the live analysis says: one figure, wherever it is read.
        kept = {"load_stages_s": load_stages_s(analysis.to_json()), "load_s": load}
        assert load_seconds(None, kept) == load
        # Time before the first log line counts: a launch 9 s earlier is a load 9 s longer.
        first = min(t for s in analysis.stages for t in (parse_log_time(s.started_at),) if t is not None)
        launched = (first.replace(year=2026) if first.year == 1900 else first).timestamp() - 9.0
        import datetime as dt

        started = dt.datetime.fromtimestamp(launched).strftime("%Y-%m-%d %H:%M:%S")
        assert load_seconds(analysis, None, started) == pytest.approx(load + 9.0), path.name
        # A start stamp that is not this log's (after its first line) is not taken.
        later = dt.datetime.fromtimestamp(launched + 60.0).strftime("%Y-%m-%d %H:%M:%S")
        assert load_seconds(analysis, None, later) == load
    assert gapped >= 2  # the gaps between stages are part of a load


def test_a_probe_without_start_to_ready_gives_no_load_rather_than_the_bars() -> None:
    assert load_seconds(None, {"load_stages_s": {"weights": 30.0, "ready": 3.0}}) is None
    assert load_text(None) == "" and load_text(40.4) == "40s" and load_text(720.0) == "12m"


async def test_the_list_shows_start_to_ready_and_the_acceptance_rate_with_its_length(tui_folder: TuiFolder) -> None:
    analysis = analyze_file(NGRAM_SERVE)
    load = load_seconds(analysis, None)
    assert load is not None and load_text(load) != load_text(_bars(analysis))  # this log has a gap: the two differ
    run_id = tui_folder.replay("tiny-cpu-vllm-ngram", NGRAM_SERVE)
    runs = Runs(load_catalog(tui_folder.folder))
    summary = {
        "run": run_id, "experiment": "tiny-cpu-vllm-ngram", "output_throughput": 80.0,
        "spec_decode_acceptance_rate": 66.8, "spec_decode_acceptance_length": 3.42,
        "load_stages_s": load_stages_s(analysis.to_json()), "load_s": load,
        "identity": {"experiment": "tiny-cpu-vllm-ngram", "engine": "vllm", "host": "local"},
    }
    await runs.write_artifact(run_id, "probe.json", json.dumps(summary).encode())
    app = ServelabApp(tui_folder.folder)
    app.watch_runs = False
    async with app.run_test(size=(160, 40)) as pilot:
        await wait_for(pilot, lambda: run_id in screen_text(app) or "66.8%" in screen_text(app))
        table = app.screen.query_one(DataTable)
        keys = [c.key.value for c in table.ordered_columns]
        index = next(i for i in range(table.row_count) if "tiny-cpu-vllm-ngram" == str(table.get_row_at(i)[1]))
        cells = {k: str(v) for k, v in zip(keys, table.get_row_at(index), strict=True)}
        assert cells["load"] == load_text(load)
        assert cells["accept"] == "66.8% · 3.42"
        table.move_cursor(row=index)  # the detail pane says the same figures, named
        await wait_for(pilot, lambda: f"load {load_text(load)} · acceptance 66.8%, length 3.42" in _detail(app), timeout=20)


def _detail(app: ServelabApp) -> str:
    from rich.console import Console
    from textual.widgets import Static

    console = Console(width=400, record=True, file=None)
    console.print(app.screen.query_one("#experiment-detail-text", Static).content)
    return console.export_text()


# -- one estimate, one wording ------------------------------------------------------------------------
@pytest.mark.parametrize("seconds", [4.0, 33.0, 59.4, 60.0, 89.0, 150.0, 3600.0])
def test_the_plan_and_the_campaign_screen_say_one_estimate(tmp_path: Path, seconds: float) -> None:
    from rich.console import Console

    from servelab.engines.campaign.listing import CampaignEntry
    from tests.fixtures.tui import make_tui_folder

    folder = make_tui_folder(tmp_path).folder
    catalog = load_catalog(folder)
    campaign = load_checked(catalog, "tiny-cpu-ngram-sweep")  # the bundled sweep
    planned = plan(campaign, catalog, lambda _h, _m: seconds)
    said = estimate_text(seconds)
    assert said.startswith("~") and ("min" in said) == (seconds >= 60)
    text = "\n".join(describe(planned))
    console = Console(width=400, record=True, file=None)
    console.print(plan_renderable(CampaignEntry(planned.campaign, campaign.path, planned)))
    screen = console.export_text()
    for load in planned.loads:
        assert f"({estimate_text(load.estimate_s)})" in text
        assert f"(load time {estimate_text(load.estimate_s)})" in screen
    assert f"estimated loading time: {estimate_text(planned.estimate_s)}" in text
    assert f"estimated loading time {estimate_text(planned.estimate_s)}" in screen


# -- the verdict and the diagnosis are one decision ---------------------------------------------------
def _summary(run: str, experiment: str, baseline: str | None, tok_s: float, rate: float | None, length: float | None, k: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "run": run, "experiment": experiment, "baseline_experiment": baseline, "model_id": "tiny", "max_tokens": 64,
        "max_concurrency": 1, "repeats": 3, "prompt_set_hash": "h", "output_throughput": tok_s,
        "stats": {"output_throughput": {"median": tok_s, "mad": tok_s * 0.01, "n": 3, "unstable": False},
                  "spec_decode_acceptance_rate": {"median": rate, "mad": 0.34, "n": 3, "unstable": False}},
        "identity": {"experiment": experiment, "engine": "vllm", "model": "/m/tiny", "num_speculative_tokens": k, "host": "local"},
    }
    if rate is not None:
        out["spec_decode_acceptance_rate"] = rate
    if length is not None:
        out["spec_decode_acceptance_length"] = length
    return out


def _diagnosis(run: str, k: int, suite_rate: float, bigrams: float, rec_k: int) -> Diagnosis:
    per_pos = [max(0.0, suite_rate - 0.1 * i) for i in range(k)]
    o = Arm("chat, temperature 0", 6, 6, drafts=90.0, draft_tokens=90.0 * k, accepted=90.0 * k * suite_rate, rate=suite_rate,
            length=1 + suite_rate * k, per_position=per_pos, unique_bigrams=bigrams, median_step_ms=9.0)
    hot = Arm("temperature 1", 4, 4, drafts=0.0, draft_tokens=0.0, accepted=0.0)
    m = Measurements(o, [o], None, None, None, False, 1.0, "test", hot)
    cost = StepCost(9.0, 6.0, "base-run", 1.5, 0.1, 1.3, None, rec_k, {k: 1.3}, "")
    ref = closest("tiny", "/m/drafter", "vllm", k, "eagle3")
    facts = RunFacts("eagle3", k, "/m/tiny", "/m/drafter")
    return Diagnosis(run, "spec", "vllm", "eagle3", k, "now", m, cost, ref, diagnose(facts, m, cost, ref), 9.0)


CASES = list(itertools.product([66.8, 15.04, 99.95], [3.42, 1.456], [1.66, 0.66, 1.04], [0.23, 0.95], [1, 4], [0.7, 0.12]))


@pytest.mark.parametrize(("rate", "length", "ratio", "bigrams", "k", "suite_rate"), CASES)
def test_every_figure_of_a_verdict_is_the_tables_and_looping_output_is_never_praised(
    rate: float, length: float, ratio: float, bigrams: float, k: int, suite_rate: float
) -> None:
    base = ("base-1", _summary("base-1", "base", None, 100.0, None, None, k))
    spec = ("spec-1", _summary("spec-1", "spec", "base", 100.0 * ratio, rate, length, k))
    diag = _diagnosis("spec-1", k, suite_rate, bigrams, rec_k=k)
    comp = build([base, spec], {"spec-1": speedup(spec[1], base[1], "base-1")}, {"spec-1": diag})
    rows = {r.label: r for r in comp.rows}
    mine = [line for line in comp.verdict if line.startswith("spec-1:")]
    assert len(mine) == 1  # one decision, one line
    line = mine[0]
    shown_rate = rows["acceptance rate (%)"].numbers[1]
    shown_len = rows["acceptance length"].numbers[1]
    shown_x = rows["speedup vs baseline"].numbers[1]
    assert shown_rate is not None and shown_len is not None and shown_x is not None
    percents = re.findall(r"acceptance (?:rate )?(\d+(?:\.\d+)?)%", line)
    assert percents and all(float(p) == shown_rate and p == f"{shown_rate:.1f}" for p in percents), line
    assert all(float(x) == shown_x for x in re.findall(r"(\d+\.\d+)x(?![-\d])", line.split("noise band")[0])), line
    assert f"acceptance length {shown_len:.2f}" in line
    assert all(int(n) == k for n in re.findall(r"K=(\d+)", line)), line
    # The diagnosis's own call: acceptance built on looping output (low acceptance on loops inflated nothing).
    looping = any(f.code == "degenerate-output" and f.severity == "warning" for f in diag.findings)
    assert looping == (bigrams < 0.5 and suite_rate >= 0.3)
    assert (NOT_MEANINGFUL in line) == looping, line
    if looping:
        assert "HELPS" not in line and "HURTS" not in line
        assert comp.speedups["spec-1"].verdict == NOT_MEANINGFUL
        assert json.loads(render(comp, "json"))["speedups"]["spec-1"]["verdict"] == NOT_MEANINGFUL
    assert f"num_tokens = {k}" not in line  # never the setting it already has


async def test_compare_of_a_diagnosed_run_on_looping_output_says_not_meaningful(tui_folder: TuiFolder) -> None:
    base = tui_folder.replay("tiny-cpu-vllm-baseline", NGRAM_SERVE)
    spec = tui_folder.replay("tiny-cpu-vllm-ngram", NGRAM_SERVE)
    runs = Runs(load_catalog(tui_folder.folder))
    await runs.write_artifact(base, "probe.json", json.dumps(_summary(base, "tiny-cpu-vllm-baseline", None, 40.0, None, None, 4)).encode())
    await runs.write_artifact(spec, "probe.json", json.dumps(_summary(spec, "tiny-cpu-vllm-ngram", "tiny-cpu-vllm-baseline", 66.4, 66.8, 3.42, 4)).encode())
    await runs.write_artifact(spec, DIAGNOSIS_JSON, json.dumps(_diagnosis(spec, 4, 0.7, 0.2, 4).to_dict()).encode())
    comp = await compare_runs(runs, [base, spec])
    mine = [line for line in comp.verdict if line.startswith(f"{spec}:")]
    assert len(mine) == 1 and NOT_MEANINGFUL in mine[0] and "HELPS" not in mine[0]
    assert "66.8%" in mine[0] and "70%" not in mine[0] and "1.66x" in mine[0]


# -- a recommendation never repeats the current setting -----------------------------------------------
@pytest.mark.parametrize("k", [1, 2, 3, 4, 6])
def test_no_finding_recommends_the_k_the_run_already_has(k: int) -> None:
    for rec_k, rate, fall in itertools.product(range(0, 8), [0.05, 0.4, 0.8], [0.0, 0.3]):
        per_pos = [max(0.0, rate - fall * i) for i in range(k)]
        o = Arm("overall", 6, 6, drafts=50.0, draft_tokens=50.0 * k, accepted=50.0 * k * rate, rate=rate, length=1 + rate * k,
                per_position=per_pos, unique_bigrams=0.9, median_step_ms=9.0)
        m = Measurements(o, [o], None, None, None, False, 1.0, "test", None)
        cost = StepCost(9.0, 6.0, "b", 1.5, 0.1, 0.8 if rec_k == 0 else 1.2, None, rec_k, {i: 1.0 for i in range(1, 8)}, "")
        findings = diagnose(RunFacts("eagle3", k, "/m/t", "/m/d"), m, cost, ReferenceMatch(False, "", "", None, None, "", "none"))
        for f in findings:
            assert f"num_tokens = {k}" not in f.next, (rec_k, rate, fall, f)
        d = Diagnosis("r", "e", "vllm", "eagle3", k, "now", m, cost, ReferenceMatch(False, "", "", None, None, "", "none"), findings, 1.0)
        assert f"num_tokens = {k}" not in verdict_line("r", "helps", 1.2, d)


def test_a_stored_diagnosis_that_repeats_the_current_k_is_not_quoted_as_a_change() -> None:
    d = _diagnosis("r", 4, 0.7, 0.95, 4)
    old = [Finding("step-cost", "warning", "estimated speedup 1.30x", "e", "[speculative] num_tokens = 4", 1.0)]
    assert "next:" not in verdict_line("r", "helps", 1.3, replace(d, findings=old))


# -- a missing figure says why ------------------------------------------------------------------------
@pytest.mark.parametrize(("ok", "drafts", "draft_tokens", "error"), list(itertools.product([0, 3], [None, 0.0, 5.0], [None, 0.0], [None, "HTTP 500: boom"])))
def test_a_group_without_acceptance_says_why(ok: int, drafts: float | None, draft_tokens: float | None, error: str | None) -> None:
    line = arm_line(Arm("temperature 1", 3, ok, drafts=drafts, draft_tokens=draft_tokens, error=error))
    assert "acceptance     -" in line
    assert re.search(r"\(\S.*\)$", line), line  # a reason in brackets closes the line


# -- compare with one run, and the unstable note --------------------------------------------------------
@pytest.mark.parametrize("baseline", [None, "base"])
def test_compare_of_one_run_says_why_there_is_no_verdict(baseline: str | None) -> None:
    one = [("spec-1", _summary("spec-1", "spec", baseline, 80.0, 66.8, 3.42, 4))]
    speedups = {} if baseline is None else {"spec-1": Speedup(None, reason="refused: no probed run of baseline experiment base")}
    comp = build(one, speedups)
    assert comp.verdict and all(line.strip() for line in comp.verdict)
    table = render(comp)
    after = table.split("Verdict:", 1)[1]
    assert "no verdict" in after


def test_the_unstable_note_is_a_count_and_the_few_that_matter() -> None:
    keys = [key for _, key, *_ in METRIC_ROWS]
    for n in range(1, len(keys) + 1):
        for chosen in (keys[:n], keys[-n:]):
            note = unstable_note(chosen)
            named = note.split(": ", 1)[1]
            assert len(note) <= 120, note  # one line, however many figures wobble
            if n > 2:
                assert named.startswith(f"{n} figures: ") and named.endswith(f" and {n - 2} more")
            if "output_throughput" in chosen:
                assert note.split(": ")[-1].startswith("output tok/s")  # the verdict's figure first
    assert unstable_note([]) == ""
