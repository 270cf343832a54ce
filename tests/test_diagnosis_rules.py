"""Each cause is named from its signature, ranked, with the next setting to try."""

from __future__ import annotations

import json

import pytest

from servelab.engines.diagnosis.model import Diagnosis, ReferenceMatch, StepCost, from_dict
from servelab.engines.diagnosis.reference import closest
from servelab.engines.diagnosis.rules import RunFacts, diagnose
from servelab.engines.diagnosis.verdict import verdict_line
from tests.fixtures.findings import CATS, NO_COST, NO_REF, arm, meas

FACTS = RunFacts("eagle3", 3, "/m/target", "/m/drafter")


def codes(findings: list) -> list[str]:  # type: ignore[type-arg]
    return [f.code for f in findings]


def test_dead_position_one_is_a_mapping_or_untrained_fault_with_the_drafter_check_next() -> None:
    o = arm("overall", 0.0, [0.0, 0.0, 0.0], bigrams=0.2)
    f = diagnose(FACTS, meas(o, raw=arm("raw", 0.01, [0.01, 0, 0]), hot=arm("t", 0.0, [0, 0, 0])), NO_COST, NO_REF)
    assert f[0].code == "position-one-near-zero"
    assert "untrained" in f[0].message and "servelab drafter /m/drafter --target /m/target" in f[0].next
    assert "not the chat template" in f[0].evidence
    # looping output that still is not accepted is only a note, never praise
    assert "degenerate-output" in codes(f) and next(x for x in f if x.code == "degenerate-output").severity == "info"


def test_high_acceptance_on_a_loop_is_refused() -> None:
    o = arm("overall", 0.8, [0.9, 0.8, 0.7], bigrams=0.15)
    f = diagnose(RunFacts("ngram", 3, "/m/t", None), meas(o), NO_COST, NO_REF)
    assert f[0].code == "degenerate-output" and f[0].severity == "warning"
    assert "not a figure to praise" in f[0].message
    assert "healthy" not in codes(f)


def test_self_draft_is_named_as_such() -> None:
    o = arm("overall", 1.0, [1.0, 1.0, 1.0], bigrams=0.2)  # the tiny target loops too: still the self-draft first
    f = diagnose(RunFacts("draft_model", 3, "/m/t", "/m/./t"), meas(o), NO_COST, NO_REF)
    assert f[0].code == "draft-equals-target"


def test_steep_fall_recommends_the_k_of_the_curve() -> None:
    o = arm("overall", 0.3, [0.75, 0.3, 0.1, 0.05, 0.02])
    cost = StepCost(20.0, 10.0, "b", 2.0, 0.2, 1.2, 0.9, 2, {1: 1.46, 2: 1.5, 3: 1.4}, "")
    f = diagnose(RunFacts("eagle3", 5, "/m/t", "/m/d"), meas(o), cost, NO_REF)
    k = next(x for x in f if x.code == "k-too-high")
    assert k.next == "[speculative] num_tokens = 2"
    assert "K=2: 1.50x" in k.evidence


def test_template_gap_and_category_gap_and_temperature() -> None:
    o = arm("overall", 0.5, [0.6, 0.5, 0.4])
    cats = [arm("conversation", 0.55), arm("coding", 0.6), arm("math", 0.5), arm("translation", 0.05)]
    f = diagnose(FACTS, meas(o, cats, raw=arm("raw", 0.2), hot=arm("hot", 0.3)), NO_COST, NO_REF)
    got = codes(f)
    assert {"template-gap", "category-gap", "temperature-drop"} <= set(got)
    assert "translation" in next(x for x in f if x.code == "category-gap").message


def test_thinking_gap() -> None:
    o = arm("overall", 0.5)
    f = diagnose(FACTS, meas(o, on=arm("on", 0.2), off=arm("off", 0.55)), NO_COST, NO_REF)
    t = next(x for x in f if x.code == "thinking-gap")
    assert "enable_thinking = false" in t.next


def test_far_below_the_published_family_and_the_compare_sentence() -> None:
    ref = closest("Kimi-K2.5", "kimi-k2.5-eagle3", "vllm", 3, "eagle3")
    o = arm("overall", 0.15, [0.3, 0.1, 0.05])
    cost = StepCost(30.0, 10.0, "base", 3.0, 0.67, 0.45 / 3 * 5, 0.66, 0, {1: 0.78}, "")
    m = meas(o)
    f = diagnose(FACTS, m, cost, ref)
    assert "below-reference" in codes(f)
    d = Diagnosis("run-1", "kimi", "vllm", "eagle3", 3, "now", m, cost, ref, f, 12.0)
    line = verdict_line("run-1", "hurts", 0.66, d)
    assert line.startswith("run-1: hurts: 0.66x; acceptance 15% against ")
    assert "65% published by lightseekorg (Hugging Face model card) for kimi-k2.5-eagle3" in line and "likely cause: " in line and "next: " in line


def test_every_reference_says_what_it_is() -> None:
    o = arm("overall", 0.15, [0.3, 0.1, 0.05])
    m = meas(o)
    local = ReferenceMatch(True, "this drafter's run r-0", "41% acceptance at K=3", 0.41, 0.41, "servelab history: run r-0 (x)", "best",
                           kind="local", run="r-0", per_position=[0.6, 0.4, 0.2])
    stated = ReferenceMatch(True, "the figure x states", "40% expected", 0.40, 0.40, "team notes", "expected", kind="stated")
    for ref, words in ((local, "41% reached by this drafter in the earlier local run r-0"), (stated, "40% stated in the experiment (source: team notes)")):
        d = Diagnosis("run-1", "x", "vllm", "eagle3", 3, "now", m, NO_COST_D, ref, diagnose(FACTS, m, NO_COST_D, ref), 1.0)
        line = verdict_line("run-1", "hurts", 0.66, d)
        assert words in line and "published" not in line, line


NO_COST_D = StepCost(None, None, None, None, None, None, None, None, {}, "no baseline")


def test_no_speculation_is_one_error() -> None:
    f = diagnose(FACTS, meas(arm("overall", None), cats=[]), NO_COST, NO_REF)
    assert codes(f) == ["no-speculation"]


def test_json_round_trip() -> None:
    o = arm("overall", 0.4, [0.6, 0.4, 0.2])
    m = meas(o, raw=arm("raw", 0.4))
    cost = StepCost(20.0, 10.0, "b", 2.0, 0.33, 0.9, None, 0, {1: 0.9, 2: 0.85}, "")
    d = Diagnosis("r", "e", "vllm", "eagle3", 3, "now", m, cost, NO_REF, diagnose(FACTS, m, cost, NO_REF), 3.0)
    back = from_dict(json.loads(json.dumps(d.to_dict())))
    assert back == d


def test_dead_start_with_a_drafter_check_fault_names_that_fault() -> None:
    from servelab.engines.diagnosis.model import StaticCheck

    o = arm("overall", 0.0, [0.0, 0.0, 0.0])
    bad = (StaticCheck("vocab-map-missing", "error", "draft vocab 32000 < 163840 and no d2t", "add d2t to the drafter's weights"),
           StaticCheck("aux-layers-convention", "warning", "ids differ from the default", "keep them if trained so"))
    f = diagnose(RunFacts("eagle3", 3, "/m/t", "/m/d", bad), meas(o), NO_COST, NO_REF)
    # the fault itself first (a certainty), then the dead position 1 that it explains
    assert f[0].code == "vocab-map-missing" and f[0].next == "add d2t to the drafter's weights"
    assert f[1].code == "position-one-near-zero"
    assert "configuration fault: vocab-map-missing" in f[1].message and f[1].next == "add d2t to the drafter's weights"
    assert "drafter checks: vocab-map-missing" in f[1].evidence and "aux-layers-convention" not in f[1].evidence
    assert "aux-layers-convention" not in [x.code for x in f]  # a doubt to rule out, not a finding


def test_dead_start_with_clean_drafter_checks_is_an_untrained_drafter() -> None:
    o = arm("overall", 0.0, [0.0, 0.0, 0.0])
    f = diagnose(RunFacts("eagle3", 3, "/m/t", "/m/d", ()), meas(o), NO_COST, NO_REF)
    assert "untrained or unrelated drafter" in f[0].message and "drafter checks: clean" in f[0].evidence
    from servelab.engines.diagnosis.model import StaticCheck

    warn = (StaticCheck("aux-layers-convention", "warning", "ids differ from the default", "keep them if trained so"),)
    f = diagnose(RunFacts("eagle3", 3, "/m/t", "/m/d", warn), meas(o), NO_COST, NO_REF)
    assert "untrained or unrelated drafter" in f[0].message and "warnings to rule out: aux-layers-convention" in f[0].evidence
    assert f[0].next.startswith("[speculative] draft_model = a drafter trained")


# A gap in the drafter's training data that its local reference run shows too (the same weights on
# the same target, served as trained) is how the drafter was trained: this run's own finding leads.
FALLS = arm("overall", 0.3, [0.75, 0.3, 0.1, 0.05, 0.02])  # steep: k-too-high at K=5 is this run's own
TRAITS = {
    "category-gap:translation": dict(cats=[arm("conversation", 0.55), arm("coding", 0.6), arm("math", 0.5), arm("translation", 0.05)]),
    "template-gap:raw": dict(raw=arm("raw", 0.6)),
    "template-gap:chat-templated": dict(raw=arm("raw", 0.05)),
    "thinking-gap:on": dict(on=arm("on", 0.1), off=arm("off", 0.5)),
    "thinking-gap:off": dict(on=arm("on", 0.5), off=arm("off", 0.1)),
}


def local(shows: list[str], then: list[float] | None = None) -> ReferenceMatch:
    pp = then or FALLS.per_position
    return ReferenceMatch(True, "this drafter's run r0", "figure", pp[0], pp[0], "servelab history: run r0", "best", kind="local", run="r0",
                          per_position=pp, drafts=50.0, shows=shows)


@pytest.mark.parametrize("key", sorted(TRAITS))
def test_a_training_gap_the_local_reference_shows_too_ranks_under_this_runs_own_finding(key: str) -> None:
    facts = RunFacts("eagle3", 5, "/m/target", "/m/drafter")
    m = meas(FALLS, **TRAITS[key])  # type: ignore[arg-type]
    alone = diagnose(facts, m, NO_COST, local([]))
    trait = next(f for f in alone if f.key == key)
    assert codes(alone).index(trait.code) < codes(alone).index("k-too-high"), codes(alone)
    other = "category-gap:coding" if key.startswith("category") else f"{key.split(':')[0]}:elsewhere"
    for unshared in (local([other]), NO_REF):  # another category or form, or no local reference: unchanged
        assert [f.key for f in diagnose(facts, m, NO_COST, unshared)][:2] == [f.key for f in alone][:2]
    shared = diagnose(facts, m, NO_COST, local([key, "k-too-high"]))
    ks = [f.key for f in shared]
    assert ks[0] == "k-too-high" and ks.index(key) > ks.index("k-too-high"), ks
    assert "the reference run r0 shows it too" in next(f for f in shared if f.key == key).evidence
    # far below the same reference, a shared gap explains nothing: the drafter itself is weaker
    below = diagnose(facts, m, NO_COST, local([key], then=[0.99, 0.9, 0.8, 0.7, 0.6]))
    ref = next(f for f in below if f.code == "below-reference")
    assert trait.code not in ref.message and "the drafter itself is weaker" in ref.message, ref.message
    assert trait.code in next(f for f in diagnose(facts, m, NO_COST, local([], then=[0.99, 0.9, 0.8, 0.7, 0.6])) if f.code == "below-reference").message

