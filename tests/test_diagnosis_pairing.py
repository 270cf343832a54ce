"""References by pair (drafter weights, target weights), the pairing finding, the ordered causes of a
dead position 1 and the drafter's training record: a drafter is trained for one target, and the same
drafter on other target weights, at a new path or replaced in place, is another pair."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.engines.diagnosis.local import by_pair, local_match, other_target
from servelab.engines.diagnosis.model import Diagnosis, DrafterIdentity, Provenance, from_dict
from servelab.engines.diagnosis.rules import RunFacts, diagnose
from servelab.engines.drafter.provenance import RecordedTarget, card_base_models, judge
from servelab.engines.runs.records import RunRecord
from servelab.engines.adapters.exchange import TargetIdentity
from tests.fixtures.findings import NO_COST, NO_REF, arm, meas

HEAD = DrafterIdentity("d00d", {"d2t": "present"})
A = TargetIdentity("aaaa", layout="L", weights="W1", config="C", tokenizer="T")
B = TargetIdentity("bbbb", layout="L", weights="W2", config="C", tokenizer="T")


def record(run: str, model: str, target: TargetIdentity | None) -> RunRecord:
    return RunRecord(run, "e", "vllm", "local", [], {}, 8000, model, f"/w/{run}", f"/w/{run}/engine.log",
                     target=target.to_dict() if target else {})


def stored(run: str, pp: list[float], target: TargetIdentity | None, drafts: float = 300.0, identity: DrafterIdentity = HEAD) -> Diagnosis:
    o = dataclasses.replace(arm("overall", sum(pp) / len(pp), pp), drafts=drafts)
    d = Diagnosis(run, "e", "vllm", "eagle3", len(pp), "2026-12-01T10:00:00+00:00", meas(o), NO_COST, NO_REF, [], 1.0, None, identity, target)
    return from_dict(d.to_dict())


def test_references_are_by_pair_not_by_path() -> None:
    history = [(record("r-a", "/m/target", A), stored("r-a", [0.35, 0.15], A)),        # the pair, trained so
               (record("r-copy", "/elsewhere/t", A), stored("r-copy", [0.3, 0.1], A)),  # the same weights, another folder
               (record("r-old", "/m/target", None), stored("r-old", [0.2, 0.1], None))]  # before fingerprints: by its path
    refs, evidence = by_pair("/m/target", A, history)
    assert {d.run for d in refs} == {"r-a", "r-copy", "r-old"} and evidence == []
    # the folder's weights replaced in place: the same path is another target; the old runs are evidence
    refs, evidence = by_pair("/m/target", B, history)
    assert {d.run for d in refs} == {"r-old"} and {d.run for _, d in evidence} == {"r-a", "r-copy"}
    ot = other_target(HEAD, evidence)
    assert ot is not None and ot.run == "r-a" and ot.target == A and ot.target_path == "/m/target" and ot.per_position == [0.35, 0.15]
    # a new path with other weights: the same
    refs, evidence = by_pair("/m/target-v2", B, history[:2])
    assert refs == [] and len(evidence) == 2


def facts(model: str, evidence_run: str = "r-a", then: list[float] | None = None, path: str = "/m/target", drafts: float = 300.0) -> RunFacts:
    hist = [(record(evidence_run, path, A), stored(evidence_run, then or [0.35, 0.15], A, drafts))]
    return RunFacts("eagle3", 2, model, "/m/head", (), B, other_target(HEAD, hist))


def test_the_pairing_is_the_top_finding_at_a_new_path_and_in_place() -> None:
    dead = dataclasses.replace(arm("overall", 0.01, [0.02, 0.0]), drafts=300.0)
    for model, words in (("/m/target-v2", "is not the one it reached that on (/m/target"), ("/m/target", "was replaced in place")):
        f = diagnose(facts(model), meas(dead, raw=arm("raw", 0.01, [0.02, 0.0])), NO_COST, NO_REF)
        top = f[0]
        assert top.code == "target-changed" and top.severity == "error", [x.code for x in f]
        assert "aaaa" in top.message and "bbbb" in top.message and words in top.message
        assert "other weights" in top.message and "same architecture" in top.message
        assert "then: per position 0.35 / 0.15" in top.evidence and "now: per position 0.02 / 0.00" in top.evidence
        assert "position-one-near-zero" in [x.code for x in f]
        pos1 = next(x for x in f if x.code == "position-one-near-zero")
        assert "most likely first: trained for another target" in pos1.message


@settings(max_examples=200, deadline=None)
@given(st.floats(0.05, 0.9), st.floats(0.0, 1.5), st.integers(20, 3000))
def test_the_pairing_is_named_only_on_a_fall(then: float, share: float, drafts: int) -> None:
    """Never when the drafter does as well here as on the other target (a target it also fits); always
    when it falls below 70% of it."""
    now = min(then * share, 1.0)
    f = [x.code for x in diagnose(facts("/m/t2", then=[then, then / 2], drafts=drafts),
                                  meas(dataclasses.replace(arm("overall", now * 0.75, [now, now / 2]), drafts=drafts)), NO_COST, NO_REF)]
    if share > 0.9:  # within a tenth of what it reached there: never a fall
        assert "target-changed" not in f
    if share < 0.7:
        assert "target-changed" in f


def test_a_local_reference_on_the_new_pair_does_not_hide_the_pairing() -> None:
    """The drafter served on the new target before, just as badly: that run is this pair's reference,
    and the fall from the other target is still the finding."""
    ref = local_match(HEAD, [stored("r-b", [0.02, 0.0], B)])
    assert ref is not None
    dead = dataclasses.replace(arm("overall", 0.008, [0.015, 0.0]), drafts=300.0)
    assert diagnose(facts("/m/target"), meas(dead), NO_COST, ref)[0].code == "target-changed"


def order(f: RunFacts, raw: list[float] | None = None) -> list[str]:
    dead = arm("overall", 0.01, [0.02, 0.0])
    top = diagnose(f, meas(dead, raw=arm("raw", sum(raw) / 2, raw) if raw else None), NO_COST, NO_REF)
    pos1 = next(x for x in top if x.code == "position-one-near-zero")
    return pos1.message.split("most likely first: ")[1].split(", ")


def test_a_dead_start_lists_its_causes_in_the_order_the_evidence_supports() -> None:
    bare = RunFacts("eagle3", 2, "/m/t", "/m/d", ())
    assert order(bare, [0.02, 0.0]) == ["untrained (or trained on too little)", "trained for another target", "a tokenizer or chat-template mismatch"]
    assert order(bare, [0.12, 0.02])[0] == "a tokenizer or chat-template mismatch"  # raw ahead, below a gap
    assert order(facts("/m/t2"), [0.02, 0.0])[0] == "trained for another target"
    other = dataclasses.replace(bare, provenance=Provenance(["README.md base_model = org/other"], "", False, "names another"))
    assert order(other, [0.02, 0.0])[0] == "trained for another target"
    same = dataclasses.replace(bare, provenance=Provenance(["README.md base_model = t"], "", True, "names this target"))
    assert order(same, [0.02, 0.0])[:2] == ["untrained (or trained on too little)", "a tokenizer or chat-template mismatch"]
    f = diagnose(bare, meas(arm("overall", 0.01, [0.02, 0.0])), NO_COST, NO_REF)[0]
    assert f.evidence.count("tells it apart") == 3 and f.next.startswith("[speculative] draft_model")


def test_the_training_record_is_read_as_the_drafters_write_it() -> None:
    assert card_base_models("---\nlicense: mit\nbase_model: moonshotai/Kimi-K2-Instruct\n---\n# x") == ["moonshotai/Kimi-K2-Instruct"]
    assert card_base_models("---\nbase_model:\n- meta-llama/Llama-3.1-8B-Instruct\n- x/y\ntags: [a]\n---\n") == ["meta-llama/Llama-3.1-8B-Instruct", "x/y"]
    assert card_base_models("# no front matter\nbase_model: a") == []
    by_name = RecordedTarget([("README.md base_model", "moonshotai/Kimi-K2.5")])
    assert judge(by_name, "/d/eagle", "/models/Kimi-K2.5", None, None)[0] is True
    assert judge(by_name, "/d/eagle", "/models/Kimi-K2.6", None, None)[0] is False
    for served in ("/hf/hub/models--moonshotai--Kimi-K2.5/snapshots/0123abcd", "/m/moonshotai/Kimi-K2.5/", "/m/kimi_k2.5"):
        assert judge(by_name, "/d/eagle", served, None, None)[0] is True, served
    assert judge(by_name, "/d/eagle", "/hf/hub/models--Qwen--Qwen3-8B/snapshots/0123abcd", None, None)[0] is False
    instruct = RecordedTarget([("README.md base_model", "meta-llama/Llama-3.1-8B-Instruct")])
    assert judge(instruct, "/d/eagle", "/models/Llama-3.1-8B", None, None)[0] is False
    rel = RecordedTarget([("training_args.json target_model_path", "../target")])
    assert judge(rel, "/m/eagle3", "/m/target", None, None)[0] is True
    assert judge(rel, "/m/eagle3", "/m/target-variant", None, None)[0] is False
    # a recorded fingerprint decides over the name: the same folder with its weights replaced
    fp = RecordedTarget([("training_args.json target_model_path", "../target")], "aaaa", "training_args.json target_fingerprint")
    assert judge(fp, "/m/eagle3", "/m/target", A, None)[0] is True
    matches, why = judge(fp, "/m/eagle3", "/m/target", B, None)
    assert matches is False and "aaaa" in why and "bbbb" in why
    assert judge(RecordedTarget(model_type="qwen2_5_vl"), "/d", "/m/t", None, "llama")[0] is False
    assert judge(RecordedTarget(), "/d", "/m/t", None, None)[0] is None


def test_the_report_shows_both_fingerprints_and_the_evidence() -> None:
    from servelab.engines.diagnosis.report import lines

    f = facts("/m/target")
    o = dataclasses.replace(arm("overall", 0.01, [0.02, 0.0]), drafts=300.0)
    d = Diagnosis("r-b", "e", "vllm", "eagle3", 2, "2026-12-02T10:00:00+00:00", meas(o), NO_COST, NO_REF,
                  diagnose(f, meas(o), NO_COST, NO_REF), 1.0, [], HEAD, B, f.other_target,
                  Provenance(["README.md base_model = ../target"], "aaaa", False, "training_args.json target_fingerprint = aaaa"))
    text = "\n".join(lines(from_dict(d.to_dict())))
    assert "target weights: bbbb" in text and "drafter weights d00d" in text
    assert "this drafter on other target weights: 25% in run r-a (target aaaa at /m/target, per position 0.35 / 0.15)" in text
    assert "training record: README.md base_model = ../target - names another target" in text
