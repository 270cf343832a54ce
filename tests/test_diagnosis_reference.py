"""The shipped reference table: every row sourced, the closest family found, or none said."""

from __future__ import annotations

import pytest

from servelab.engines.diagnosis.reference import REFERENCES, closest


def test_every_row_has_a_source_and_a_figure() -> None:
    for r in REFERENCES:
        assert r.source.startswith("https://"), r
        assert 0.0 < r.acceptance < 1.0, r


def test_kimi_k25_on_vllm_finds_the_published_range() -> None:
    m = closest("/models/Kimi-K2.5", "/models/kimi-k2.5-eagle3", "vllm", 3, "eagle3")
    assert m.applies and m.label == "kimi-k2.5-eagle3"
    assert m.low is not None and m.high is not None
    assert 0.4 < m.low <= m.high < 0.8
    assert "vllm" in m.figure


def test_k_differs_is_said() -> None:
    m = closest("Kimi-K2.5", "kimi-k2.5-eagle3", "vllm", 5, "eagle3")
    assert m.applies and "this run drafts K=5" in m.why


@pytest.mark.parametrize(("drafter", "method"), [("/tmp/tiny-eagle3", "eagle3"), (None, "ngram"), ("/m/tiny", "draft_model")])
def test_no_reference_for_an_unknown_family(drafter: str | None, method: str) -> None:
    m = closest("/models/tiny-llama", drafter, "vllm", 3, method)
    assert not m.applies and "no reference applies" in m.why
