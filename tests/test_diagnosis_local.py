"""Which reference a run is held against (local history, the experiment's stated figure, published),
and the findings each gives: a drafter whose config changed since its best run is named by the
change; a run below its reference with no other cause is called weaker, with one it ranks under it."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.engines.diagnosis.artifacts import temperature_arg
from servelab.engines.diagnosis.identity import settings_of
from servelab.engines.diagnosis.local import local_match, stated_match
from servelab.engines.diagnosis.model import Arm, Diagnosis, DrafterIdentity, from_dict
from servelab.engines.diagnosis.rules import FAR_BELOW_REFERENCE, RunFacts, diagnose
from servelab.engines.catalog.experiment import Experiment
from tests.fixtures.findings import NO_COST, NO_REF, arm, meas

FACTS = RunFacts("eagle3", 2, "/m/target", "/m/drafter")
GOOD = DrafterIdentity("f00d", {"eagle_config.eagle_aux_hidden_state_layer_ids": "[1, 2, 3]", "d2t": "present"})


def stored(run: str, per_position: list[float], identity: DrafterIdentity = GOOD, date: str = "2026-12-01T10:00:00+00:00",
           drafts: float = 50.0) -> Diagnosis:
    o = dataclasses.replace(arm("overall", sum(per_position) / len(per_position), per_position), drafts=drafts)
    diag = Diagnosis(run, "good", "vllm", "eagle3", len(per_position), date, meas(o), NO_COST, NO_REF, [], 1.0, None, identity)
    return from_dict(diag.to_dict())  # as read back from diagnosis.json


def exp(**spec: object) -> Experiment:
    return Experiment.model_validate({"name": "e", "engine": "vllm", "model": "/m/target",
                                      "speculative": {"method": "eagle3", "draft_model": "/m/drafter", "num_tokens": 2, **spec}})


def test_the_best_earlier_run_of_the_same_weights_is_the_local_reference() -> None:
    ref = local_match(GOOD, [stored("r1", [0.3, 0.1]), stored("r4", [0.5, 0.2], date="2026-12-03T00:00:00+00:00"),
                             stored("r2", [0.5, 0.2], date="2026-12-02T00:00:00+00:00"), stored("r3", [0.4, 0.3, 0.1])])
    assert ref is not None and ref.kind == "local" and ref.run == "r2" and ref.per_position == [0.5, 0.2]
    assert ref.changed == [] and "r2" in ref.source


def test_a_changed_config_on_the_same_weights_is_named_when_acceptance_falls() -> None:
    shifted = dataclasses.replace(GOOD, settings={**GOOD.settings, "eagle_config.eagle_aux_hidden_state_layer_ids": "[0, 1, 2]"})
    ref = local_match(shifted, [stored("r1", [0.5, 0.2])])
    assert ref is not None and ref.changed == ["eagle_config.eagle_aux_hidden_state_layer_ids: [1, 2, 3] -> [0, 1, 2]"]
    low = arm("overall", 0.05, [0.08, 0.02])
    f = diagnose(FACTS, meas(low), NO_COST, ref)
    assert f[0].code == "drafter-config-changed" and f[0].severity == "error"
    assert "r1" in f[0].message and "[0, 1, 2]" in f[0].message and "restore" in f[0].next
    # the same change with acceptance where it was is not a fault
    assert "drafter-config-changed" not in [x.code for x in diagnose(FACTS, meas(arm("overall", 0.35, [0.5, 0.2])), NO_COST, ref)]


SHIFTED = dataclasses.replace(GOOD, settings={**GOOD.settings, "eagle_config.eagle_aux_hidden_state_layer_ids": "[0, 1, 2]"})


def codes_against(identity: DrafterIdentity, then: list[float], now: list[float], drafts: float) -> list[str]:
    ref = local_match(identity, [stored("r1", then, drafts=drafts)])
    assert ref is not None
    o = dataclasses.replace(arm("overall", sum(now) / len(now), now), drafts=drafts)
    return [x.code for x in diagnose(FACTS, meas(o), NO_COST, ref)]


def test_a_changed_config_is_named_on_a_measured_fall_short_of_far_below() -> None:
    """A CI run of the story: aux ids shifted, 0.25 / 0.07 against the pair's 0.33 / 0.12 (71% of it,
    not far below). Over ~600 draft steps a run that fell that much is the change, not noise; over 20 it is not
    told from noise, and without a changed config it is a rerun in line with its reference."""
    then, now = [0.33, 0.12], [0.25, 0.07]
    assert codes_against(SHIFTED, then, now, 600)[0] == "drafter-config-changed"
    assert "drafter-config-changed" not in codes_against(SHIFTED, then, now, 20)
    assert "near-reference" in codes_against(SHIFTED, then, now, 20)
    assert "near-reference" in codes_against(GOOD, then, now, 600)
    # a rerun's own wobble (23% against 25%, 8% lower) is not a fall, however many drafts
    assert "drafter-config-changed" not in codes_against(SHIFTED, [0.35, 0.15], [0.33, 0.13], 10_000)


@settings(max_examples=200, deadline=None)
@given(st.floats(0.05, 0.9), st.floats(0.7, 1.0), st.integers(1, 2000), st.integers(1, 4))
def test_more_drafts_never_unname_a_fall_after_a_config_change(then: float, share: float, drafts: int, more: int) -> None:
    """The evidence only grows with the counts: a fall named at N drafts stays named at more."""
    then_pp, now_pp = [then, then / 2], [then * share, then * share / 2]
    if "drafter-config-changed" in codes_against(SHIFTED, then_pp, now_pp, drafts):
        assert "drafter-config-changed" in codes_against(SHIFTED, then_pp, now_pp, drafts * (1 + more))
    if share > 0.9:  # within a tenth of the reference: never a fall
        assert "drafter-config-changed" not in codes_against(SHIFTED, then_pp, now_pp, drafts)


def test_a_run_at_another_k_is_compared_on_the_positions_both_drafted() -> None:
    ref = local_match(GOOD, [stored("r1", [0.5, 0.2])])
    assert ref is not None
    # K=6 past the knee: overall rate far lower, but positions 1-2 are where they were
    knee = arm("overall", 0.13, [0.5, 0.2, 0.05, 0.01, 0.0, 0.0])
    f = diagnose(dataclasses.replace(FACTS, k=6), meas(knee), NO_COST, ref)
    assert "below-reference" not in [x.code for x in f] and "near-reference" in [x.code for x in f]
    assert f[0].code == "k-too-high"


def test_stated_figure_below_with_no_other_cause_reads_as_a_weaker_drafter() -> None:
    ref = stated_match(exp(expected_acceptance=0.4, expected_source="the recipe's own run"))
    assert ref is not None and ref.kind == "stated" and ref.low == 0.4
    f = diagnose(FACTS, meas(arm("overall", 0.1, [0.15, 0.05])), NO_COST, ref)
    assert f[0].code == "below-reference" and "under-trained" in f[0].message and "the recipe's own run" in f[0].evidence


def test_below_reference_ranks_under_a_named_cause() -> None:
    ref = stated_match(exp(expected_acceptance=0.4, expected_source="s"))
    assert ref is not None
    o = arm("overall", 0.1, [0.15, 0.05])
    f = diagnose(FACTS, meas(o, raw=arm("raw", 0.4, [0.5, 0.3])), NO_COST, ref)
    assert f[0].code == "template-gap"
    below = next(x for x in f if x.code == "below-reference")
    assert "explained by template-gap" in below.message


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.01, 1.0), min_size=1, max_size=6), st.lists(st.floats(0.01, 1.0), min_size=1, max_size=6))
def test_below_or_near_follows_the_common_positions(now: list[float], then: list[float]) -> None:
    now, then = sorted(now, reverse=True), sorted(then, reverse=True)
    ref = local_match(GOOD, [stored("r1", then)])
    assert ref is not None
    f = [x.code for x in diagnose(dataclasses.replace(FACTS, k=len(now)), meas(arm("overall", sum(now) / len(now), now)), NO_COST, ref)]
    n = min(len(now), len(then))
    below = sum(now[:n]) / n < FAR_BELOW_REFERENCE * (sum(then[:n]) / n)
    assert ("below-reference" in f) == below and ("near-reference" in f) == (not below)


def test_expected_acceptance_needs_its_source() -> None:
    with pytest.raises(ValueError, match="go together"):
        exp(expected_acceptance=0.4)
    assert exp(expected_acceptance=0.4, expected_source="s").speculative.expected_acceptance == 0.4


@pytest.mark.parametrize(("engine", "key"), [("vllm", "override-generation-config"), ("sglang", "preferred-sampling-params")])
def test_the_experiments_sampling_defaults_set_the_serving_temperature(engine: str, key: str) -> None:
    def e(args: dict[str, object]) -> Experiment:
        return Experiment.model_validate({"name": "e", "engine": engine, "model": "/m", "engine_args": args})

    assert temperature_arg(e({key: '{"temperature": 0.7, "top_p": 0.9}'})) == (0.7, f"[engine_args] {key} temperature")
    assert temperature_arg(e({})) is None
    assert temperature_arg(e({key: "not json"})) is None
    assert temperature_arg(e({key: '{"top_p": 0.9}'})) is None


def test_settings_are_what_changes_the_computation() -> None:
    cfg = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}, "use_aux_norm": True, "rms_norm_eps": 1e-6,
           "draft_vocab_size": 512, "hidden_size": 192}
    s = settings_of(cfg, {"fc.weight", "d2t"})
    assert s == {"eagle_config.eagle_aux_hidden_state_layer_ids": "[1, 2, 3]", "use_aux_norm": "true", "draft_vocab_size": "512", "d2t": "present"}
    assert settings_of(cfg, {"fc.weight"})["d2t"] == "absent"


def counted(name: str, accepted: float, tokens: float) -> Arm:
    return Arm(name, 2, 2, drafts=tokens / 2, draft_tokens=tokens, accepted=accepted, rate=accepted / tokens,
               per_position=[accepted / tokens], unique_bigrams=0.95)


@pytest.mark.parametrize(("prose", "code", "gap"), [
    ((18, 152), (26, 108), True),     # 12% vs 24% at low acceptance: z 2.6 over 260 drafted tokens
    ((9, 76), (13, 54), False),       # the same rates on half the tokens: not significant
    ((40, 100), (50, 100), False),    # 40% vs 50%: not far below
    ((10, 100), (60, 100), True),     # an absolute gap of 0.5
])
def test_a_category_far_below_needs_a_share_and_evidence(prose: tuple[int, int], code: tuple[int, int], gap: bool) -> None:
    p, c = counted("prose", *prose), counted("code", *code)
    o = counted("overall", prose[0] + code[0], prose[1] + code[1])
    f = [x.code for x in diagnose(FACTS, meas(o, cats=[p, c]), NO_COST, NO_REF)]
    assert ("category-gap" in f) == gap, f


def test_a_local_reference_keeps_what_its_run_showed_as_trained_and_never_its_notes() -> None:
    """Read back from diagnosis.json, the best run's own findings (by key) travel with the reference."""
    cats = [arm("prose", 0.1), arm("code", 0.5)]
    o = arm("overall", 0.3, [0.5, 0.1])
    found = diagnose(FACTS, meas(o, cats), NO_COST, NO_REF)
    diag = Diagnosis("r1", "good", "vllm", "eagle3", 2, "2026-12-01T10:00:00+00:00", meas(o, cats), NO_COST, NO_REF, found, 1.0, None, GOOD)
    ref = local_match(GOOD, [from_dict(diag.to_dict())])
    assert ref is not None and "category-gap:prose" in ref.shows
    assert not {f.key for f in found if f.severity == "info"} & set(ref.shows) and {f.severity for f in found} & {"info"}
    # the same gap now ranks under this run's own finding (a curve that falls off at a higher K)
    now = diagnose(RunFacts("eagle3", 5, "/m/target", "/m/drafter"), meas(arm("overall", 0.2, [0.5, 0.1, 0.02, 0.01, 0.0]), cats), NO_COST, ref)
    assert [f.code for f in now][0] == "k-too-high", [f.key for f in now]
