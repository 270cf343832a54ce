"""The one small protocol every engine adapter implements, and the registry that finds them.

An engine is one module (``engines/adapters/vllm.py``, ``engines/adapters/sglang.py``) exposing ``ADAPTER``. The core
never branches on an engine's name: it asks the adapter. Adding a third engine is one new file
(and its ``_argcheck.py`` beside it) plus one registry line: its module name in :data:`ENGINE_MODULES`,
or, for a plug-in outside this package, :func:`register_engine` / the ``SERVELAB_ENGINES`` variable
(DEVELOPERS.md lists a new engine's files).

Members, by concern:
- command line: :meth:`EngineAdapter.problems`, :meth:`EngineAdapter.launch_spec` and
  :meth:`EngineAdapter.rehearsal_spec` (the same start-up with dummy weights, see ``engines/rehearsal``);
- log grammar: :attr:`EngineAdapter.grammar` (see ``engines/logs``);
- metrics reading: :meth:`EngineAdapter.read_acceptance` (see ``engines/probe``);
- argument validation on the host: :meth:`EngineAdapter.validation`, which names the engine's own
  check file beside the adapter (``engines/<engine>_argcheck.py``; see ``engines/preflight``);
- drafter rules of the installed version: :meth:`EngineAdapter.drafter_rules` (see ``engines/drafter``).
"""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from servelab.engines.adapters.exchange import AcceptanceWindow, Inexpressible, LatencyHistograms, LaunchSpec, NodePlan, NodeTarget, PromptSet, RendezvousGrammar, SettingsGrammar, StopPlan
from servelab.engines.errors import ServelabError

if TYPE_CHECKING:
    import httpx

    from servelab.engines.drafter.rules import EngineRules, RulesQuery, SourceReader
    from servelab.engines.catalog.experiment import Experiment
    from servelab.engines.logs.grammar import LogGrammar

#: Modules that each define ``ADAPTER``. One line per engine; a plug-in engine is added by
#: :func:`register_engine` or by :data:`PLUGIN_ENV` (what a subprocess, the CLI, reads).
ENGINE_MODULES: dict[str, str] = {
    "vllm": "servelab.engines.adapters.vllm",
    "sglang": "servelab.engines.adapters.sglang",
}
#: The plug-in entry point: ``NAME=MODULE`` pairs, comma-separated (``myengine=mypackage.myengine_adapter``),
#: each an engine whose module (importable where servelab runs) defines ``ADAPTER``. Read once, at import.
PLUGIN_ENV = "SERVELAB_ENGINES"
_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_MODULE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
#: ``PLUGIN_ENV`` entries that are not ``NAME=MODULE``: said where an unknown engine is reported.
_BAD_PLUGINS: list[str] = []


def register_engine(name: str, module: str) -> None:
    """Add engine ``name`` whose adapter is ``module.ADAPTER`` (a built-in engine keeps its own).
    ``ValueError`` when the name or the module path is malformed."""
    if not _NAME.fullmatch(name) or not _MODULE.fullmatch(module):
        raise ValueError(f"engine {name!r} = {module!r}: want a lower-case name and a dotted module path")
    ENGINE_MODULES.setdefault(name, module)


def _register_plugins(text: str) -> None:
    for entry in filter(None, (e.strip() for e in text.split(","))):
        name, eq, module = entry.partition("=")
        try:
            if not eq:
                raise ValueError(entry)
            register_engine(name.strip(), module.strip())
        except ValueError:
            _BAD_PLUGINS.append(entry)


_register_plugins(os.environ.get(PLUGIN_ENV, ""))


@dataclass(frozen=True)
class ArgValidation:
    """How the engine's own code checks the server flags on the host, without loading a model.

    ``check`` is the engine's validation file beside its adapter (``engines/<engine>_argcheck.py``,
    defining ``check(flags) -> warnings``); the host runs it with its own interpreter inside the
    frame ``engines/helpers/validate_args.py``. ``label`` names whose checks ran, for the report.
    """

    check: Path
    flags: list[str]
    label: str

    def request(self, engine: str) -> dict[str, Any]:
        """The JSON request the frame reads on stdin."""
        return {"engine": engine, "file": self.check.name, "check": self.check.read_text(encoding="utf-8"), "flags": self.flags}


@runtime_checkable
class EngineAdapter(Protocol):
    """What the core needs from an engine."""

    #: Key used in experiment files (``engine = "vllm"``).
    name: str
    #: The importable package on the host (``vllm``, ``sglang``): versions, patches are rooted here.
    package: str
    #: Lines that, when found in a log's head, say it is this engine's (for ``analyze`` guessing).
    log_signatures: tuple[str, ...]
    #: How this engine's log reads: stages, ready/crash lines, wrappers, figures (see engines/logs).
    grammar: LogGrammar
    #: How its server is stopped: leader first or not, and the least time before any SIGKILL.
    stop_plan: StopPlan
    #: The ``[engine_args]`` key that sets the maximum context length (the drafter checks compare it).
    max_len_arg: str
    #: The ``[engine_args]`` key whose JSON object sets the server's default sampling parameters
    #: (its ``temperature`` is what clients get unless they set one); it wins over the model's
    #: ``generation_config.json``.
    sampling_defaults_arg: str
    #: The server's own TTFT / inter-token latency histograms in ``/metrics`` (None: it has none).
    latency_histograms: LatencyHistograms | None
    #: Where the log says the settings the engine resolved, in common terms (``engines.verdict.fairness``).
    settings: SettingsGrammar
    #: ``[engine_args]`` a campaign adds to every load so that ``/metrics`` carries what its
    #: records are replayed from (the acceptance counters); the definition's own values win.
    metrics_args: tuple[tuple[str, Any], ...]
    #: HTTP paths, asked in order, whose JSON answer's ``version`` is the server's version.
    version_paths: tuple[str, ...]
    #: Name prefixes its processes give files in /dev/shm beyond those of Python, torch and NCCL
    #: (``helpers/hostlib.py``'s ``COMMON_SHM_PREFIXES``): a run's cleanup removes only files with
    #: one of them, and only those its own processes were seen holding.
    shm_prefixes: tuple[str, ...]

    def problems(self, exp: Experiment) -> list[Inexpressible]:
        """Settings of ``exp`` this engine cannot express."""
        ...

    def launch_spec(self, exp: Experiment, python: str, model: str, draft_model: str | None) -> LaunchSpec:
        """argv and env that start the server. ``model``/``draft_model`` are paths as seen on the host."""
        ...

    def rehearsal_spec(self, exp: Experiment, spec: LaunchSpec) -> LaunchSpec:
        """``spec`` (the launch's own argv and env) changed for a rehearsal: dummy weights for the
        target and the drafter, and nothing else (no warm-up, compile or graph capture skipped)."""
        ...

    def engine_flags(self, exp: Experiment, model: str, draft_model: str | None) -> list[str]:
        """The server's flags alone (no interpreter, no module): what the engine's parser validates."""
        ...

    def validation(self, exp: Experiment, model: str, draft_model: str | None) -> ArgValidation:
        """What the host-side argument check runs: the same flags the server gets, judged by the engine."""
        ...

    async def drafter_rules(self, read: SourceReader, query: RulesQuery) -> EngineRules:
        """What this engine version accepts from a drafter, read from its installed source through ``read``."""
        ...

    #: ``[multinode] backend`` values this engine has (its own mechanisms; no home-made launcher).
    multinode_backends: tuple[str, ...]

    def node_plans(self, exp: Experiment, targets: list[NodeTarget]) -> list[NodePlan]:
        """What each node of a multi-node experiment runs, head first (``targets[0]``)."""
        ...

    #: The engine's rendezvous lines, and what a stuck join points at (``engines/nodes/hints.py``).
    rendezvous: RendezvousGrammar

    def read_acceptance(self, http: httpx.AsyncClient, exp: Experiment | None, prompts: PromptSet, max_tokens: int) -> AcceptanceWindow:
        """A window that measures speculative-decoding acceptance the way this engine counts it.

        ``http`` is bound to the server's base URL; the probe brackets each repeat with it.
        """
        ...

    def batch_size_schedule(self, exp: Experiment, best_k: list[tuple[int, int]]) -> str | None:
        """Ready-to-paste flags that make the server choose K by batch size, from measured
        ``(concurrency, best K)`` pairs (K 0: no speculation there); None when the engine has no such setting."""
        ...


def get_adapter(name: str) -> EngineAdapter:
    """The adapter for an engine name; ``KeyError`` with the known names when there is none."""
    module = ENGINE_MODULES.get(name)
    if module is None:
        bad = f"; {PLUGIN_ENV} entries not NAME=MODULE: {', '.join(map(repr, _BAD_PLUGINS))}" if _BAD_PLUGINS else ""
        raise KeyError(f"unknown engine {name!r} (known: {', '.join(sorted(ENGINE_MODULES))}{bad})")
    try:
        adapter: EngineAdapter = importlib.import_module(module).ADAPTER
    except (ImportError, AttributeError) as exc:
        raise ServelabError(f"engine {name!r}: {module}.ADAPTER cannot be loaded ({type(exc).__name__}: {exc})") from exc
    return adapter


def all_adapters() -> list[EngineAdapter]:
    return [get_adapter(n) for n in ENGINE_MODULES]


def any_version_paths() -> tuple[str, ...]:
    """Every engine's version paths, each once: what a probe of a server of unknown engine asks."""
    return tuple(dict.fromkeys(p for a in all_adapters() for p in a.version_paths))


def render_flags(args: dict[str, Any]) -> tuple[list[str], list[Inexpressible]]:
    """``[engine_args]`` to flags: ``true`` is a bare flag, lists repeat values after one flag."""
    out: list[str] = []
    bad: list[Inexpressible] = []
    for key, value in args.items():
        flag = f"--{key}"
        if value is True:
            out.append(flag)
        elif value is False:
            bad.append(Inexpressible(f"engine_args.{key}", "false is not a flag value: remove the key (or use the engine's --no-... flag = true)"))
        elif isinstance(value, list):
            out.append(flag)
            out.extend(str(v) for v in value)
        else:
            out.extend([flag, str(value)])
    return out, bad


def engine_args_problems(args: dict[str, Any], managed: dict[str, str]) -> list[Inexpressible]:
    """``[engine_args]`` entries that contradict a key servelab renders itself (``managed``: flag -> key) or cannot render."""
    out = [
        Inexpressible(f"engine_args.{key}", f"servelab sets this flag: use the key '{managed[key]}' instead")
        for key in args
        if key in managed
    ]
    out.extend(render_flags(args)[1])
    return out


def speculative_flags(exp: Experiment) -> list[str]:
    """The engine's own words for the speculation settings (its ``--speculative*`` flags and values)."""
    if exp.speculative.method == "none" or exp.engine not in ENGINE_MODULES:
        return []
    flags = get_adapter(exp.engine).engine_flags(exp, exp.model, exp.speculative.draft_model)
    out: list[str] = []
    keep = False
    for token in flags:
        if token.startswith("--"):
            keep = token.startswith("--speculative")
        if keep:
            out.append(token)
    return out
