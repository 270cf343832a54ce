"""ToyLLM's adapter: a TEST DOUBLE engine, registered from the test suite (tests/test_third_engine.py).

It is the whole of a third engine: this file, the server it starts (``server.py`` beside it, which
is also its argument check) and one registry line (``SERVELAB_ENGINES=toyllm=tests.third_engine.adapter``
or :func:`servelab.engines.adapters.base.register_engine`). Nothing under ``engines/`` or ``tui/`` names it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from servelab.engines.adapters.base import ArgValidation, EngineAdapter, engine_args_problems, render_flags
from servelab.engines.errors import ServelabError
from servelab.engines.catalog.experiment import Experiment
from servelab.engines.logs.grammar import BarRule, Evidence, Header, LogGrammar, StageRule, parse_header
from servelab.engines.probe.metrics import sum_counters
from servelab.engines.adapters.exchange import (
    Acceptance, Inexpressible, LatencyHistograms, LaunchSpec, NodePlan, NodeTarget, PromptSet, RendezvousGrammar, SettingsGrammar, StopPlan,
)

if TYPE_CHECKING:
    from servelab.engines.drafter.rules import EngineRules, RulesQuery, SourceReader

NAME = "toyllm"
#: The module path the registry line names.
MODULE = __name__
SERVER = Path(__file__).with_name("server.py")
#: Flags servelab sets from top-level keys.
MANAGED_FLAGS = {"model": "model", "port": "port", "served-model-name": "served_model_name", "spec-tokens": "speculative"}

#: "[toyllm 12:00:00] msg" (and "[toyllm] msg", unstamped): ToyLLM's own header.
_HEADER = re.compile(r"\[toyllm(?: (\d\d:\d\d:\d\d))?\] ")


def parse(text: str) -> Header:
    """ToyLLM's header; any other line (a traceback, a Python logger's) the shared way."""
    m = _HEADER.match(text)
    if m is None:
        return parse_header(text)
    return Header("toyllm", "", m.group(1) or "", text[m.end() :])


GRAMMAR = LogGrammar(
    engine=NAME,
    parse=parse,
    stage_rules=(
        StageRule("starting toyllm", ("process",), "start", r"toyllm (?P<v>\S+)", "toyllm {v}"),
        StageRule("config: ", ("config",), "start"),
        StageRule("weights loaded in", ("weights",), "end", r"in (?P<s>[\d.]+) s", "loaded in {s} s"),
        StageRule("warming up", ("warmup",), "start"),
    ),
    bars=(BarRule("loading weights", ("weights",), r"loading weights (?P<n>\d+)/(?P<total>\d+)"),),
    ready=("ready on port",),
    shutdown=("shutting down",),
    wrappers=(),
    fatal=(),
    metrics=(),
    serving=(Evidence("POST /v1/"),),
    # where its lines begin (engines/logs/prefix.py): without it, its stamp reads as a capture prefix
    line_starts=(rb"\[toyllm(?: \d\d:\d\d:\d\d)?\] ",),
)


class ToyAcceptanceWindow:
    """Acceptance from ToyLLM's ``/metrics`` counters, their growth over one repeat."""

    COUNTERS = ("toyllm:spec_drafts", "toyllm:spec_draft_tokens", "toyllm:spec_accepted_tokens")

    def __init__(self, http: httpx.AsyncClient) -> None:
        self._http = http
        self._before: dict[str, Any] = {}

    async def _read(self) -> dict[str, Any]:
        r = await self._http.get("/metrics")
        r.raise_for_status()
        return sum_counters(r.text, self.COUNTERS)

    async def start(self) -> None:
        self._before = await self._read()

    def request_fields(self) -> dict[str, Any]:
        return {}

    def note(self, payload: Mapping[str, Any]) -> None:
        return None

    async def finish(self) -> Acceptance | None:
        after = await self._read()
        drafts, tokens, accepted = (float(after.get(c, 0)) - float(self._before.get(c, 0)) for c in self.COUNTERS)
        if drafts <= 0 or tokens <= 0:
            return None
        return Acceptance("toyllm /metrics", drafts, tokens, accepted, accepted / tokens, 1.0 + accepted / drafts)


class ToyAdapter:
    """ToyLLM (a test double): one process, its own log format, OpenAI-compatible routes."""

    name: str = NAME
    package: str = "toyllm"
    log_signatures: tuple[str, ...] = ("[toyllm",)
    grammar: LogGrammar = GRAMMAR
    stop_plan: StopPlan = StopPlan()
    max_len_arg: str = "max-len"
    sampling_defaults_arg: str = "sampling-defaults"
    latency_histograms: LatencyHistograms | None = LatencyHistograms("toyllm:time_to_first_token_seconds", "toyllm:inter_token_latency_seconds")
    settings: SettingsGrammar = SettingsGrammar(
        args_line=r"config: (\{.*\})\s*$", resolved=(), names=(("max_len", "max_len", False),),
        engine_args=(("max_len", "max-len"),), states_defaults=True,
    )
    metrics_args: tuple[tuple[str, Any], ...] = ()
    version_paths: tuple[str, ...] = ("/version",)
    shm_prefixes: tuple[str, ...] = ("toyllm_",)
    multinode_backends: tuple[str, ...] = ()
    rendezvous: RendezvousGrammar = RendezvousGrammar(begin=(), end=(), expected_s=0.0, settings="")

    def problems(self, exp: Experiment) -> list[Inexpressible]:
        out = engine_args_problems(exp.engine_args, MANAGED_FLAGS)
        if exp.speculative.method not in ("none", "ngram"):
            out.append(Inexpressible("speculative.method", "ToyLLM drafts by n-gram only"))
        if exp.parallel.tensor * exp.parallel.data * exp.parallel.pipeline > 1:
            out.append(Inexpressible("parallel", "ToyLLM runs one process"))
        if exp.multinode is not None:
            out.append(Inexpressible("multinode", "ToyLLM runs on one node"))
        return out

    def engine_flags(self, exp: Experiment, model: str, draft_model: str | None) -> list[str]:
        flags = ["--model", model, "--port", str(exp.port)]
        if exp.served_model_name:
            flags += ["--served-model-name", exp.served_model_name]
        if exp.speculative.method != "none" and exp.speculative.num_tokens:
            flags += ["--spec-tokens", str(exp.speculative.num_tokens)]
        return flags + render_flags(exp.engine_args)[0]

    def launch_spec(self, exp: Experiment, python: str, model: str, draft_model: str | None) -> LaunchSpec:
        # the server as a file argument, never through a shell
        return LaunchSpec(argv=[python, "-u", str(SERVER), *self.engine_flags(exp, model, draft_model)], env={"PYTHONUNBUFFERED": "1", **exp.env})

    def rehearsal_spec(self, exp: Experiment, spec: LaunchSpec) -> LaunchSpec:
        return LaunchSpec(argv=[*spec.argv, "--load-steps", "1"], env=dict(spec.env))

    def validation(self, exp: Experiment, model: str, draft_model: str | None) -> ArgValidation:
        return ArgValidation(check=SERVER, flags=self.engine_flags(exp, model, draft_model), label="toyllm's parser")

    async def drafter_rules(self, read: SourceReader, query: RulesQuery) -> EngineRules:
        raise ServelabError("ToyLLM has no drafter models")

    def node_plans(self, exp: Experiment, targets: list[NodeTarget]) -> list[NodePlan]:
        return []

    def read_acceptance(self, http: httpx.AsyncClient, exp: Experiment | None, prompts: PromptSet, max_tokens: int) -> ToyAcceptanceWindow:
        return ToyAcceptanceWindow(http)

    def batch_size_schedule(self, exp: Experiment, best_k: list[tuple[int, int]]) -> str | None:
        return None


#: What the registry loads (typed as the protocol: mypy checks the double implements all of it).
ADAPTER: EngineAdapter = ToyAdapter()

