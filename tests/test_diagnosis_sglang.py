"""The suite on SGLang's per-request figures (FakeSglangServer: SGLang is GPU-only here).

Each category is its own window of per-request figures; routes the server lacks (raw
``/v1/completions``, ``/tokenize``) are reported, never fatal.
"""

from __future__ import annotations

import pytest

from servelab.engines.adapters.base import get_adapter
from servelab.engines.catalog.folder import load_catalog
from servelab.engines.diagnosis.measure import SuiteSettings, measure
from servelab.engines.probe import prompts
from servelab.engines.adapters.sglang import draft_tokens_per_step
from tests.conftest import EXPERIMENTS
from tests.fixtures.fake_sglang import TOKENS_PER_STEP, FakeSglangServer

MAX_TOKENS = 12


@pytest.mark.parametrize("fake_sglang", ["native", "openai"], indirect=True)
async def test_per_category_windows_on_sglang(fake_sglang: FakeSglangServer) -> None:
    exp = load_catalog(EXPERIMENTS).get("kimi-k25-sglang-eagle3").experiment
    k = draft_tokens_per_step(exp)
    assert k
    m = await measure(fake_sglang.url, get_adapter("sglang"), exp, prompts.builtin("mixed"),
                      SuiteSettings(max_tokens=MAX_TOKENS, per_category=1, serving_temperature=0.0))
    assert [a.name for a in m.categories] == list(prompts.CATEGORIES)
    for a in m.categories:
        assert a.length == pytest.approx(TOKENS_PER_STEP) and a.drafts == MAX_TOKENS / TOKENS_PER_STEP
    assert m.overall.drafts == pytest.approx(len(prompts.CATEGORIES) * MAX_TOKENS / TOKENS_PER_STEP)
    assert m.overall.rate == pytest.approx((TOKENS_PER_STEP - 1) / k)
    assert m.template_has_thinking is None  # no /tokenize: cannot tell, so not probed
    assert m.at_temperature is None  # serving temperature 0: nothing more to measure
    assert m.raw is not None and m.raw.ok == 0 and m.raw.error and "404" in m.raw.error
