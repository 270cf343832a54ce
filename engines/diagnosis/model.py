"""The typed objects a diagnosis is made of, and their JSON form (``diagnosis.json``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from servelab.engines.adapters.exchange import AsDict, TargetIdentity

Severity = Literal["error", "warning", "info"]
#: Order in which severities are ranked (first = most important).
SEVERITY_ORDER: dict[str, int] = {"error": 0, "warning": 1, "info": 2}
FORMAT = "servelab-diagnosis/1"


@dataclass(frozen=True)
class Finding(AsDict):
    """One conclusion: a stable code, what it means, the numbers behind it, the setting to try next.

    ``weight`` orders findings of the same severity (larger = explains more of the gap).
    """

    code: str
    severity: Severity
    message: str
    evidence: str
    next: str
    weight: float = 0.0
    #: What the finding is about within its code (a category's name, the better prompt form); "" for the run as a whole.
    about: str = ""

    @property
    def key(self) -> str:
        """The same finding in another run's diagnosis has the same key."""
        return f"{self.code}:{self.about}" if self.about else self.code


@dataclass(frozen=True)
class StaticCheck(AsDict):
    """One finding of the drafter checks (``servelab drafter``), as the diagnosis cites it."""

    code: str
    severity: Severity
    message: str
    fix: str


@dataclass(frozen=True)
class Arm(AsDict):
    """Acceptance over one bracketed group of requests (a category, raw prompts, a temperature...).

    ``rate`` is accepted / drafted tokens (0..1), ``per_position[i]`` accepted at position i / drafts
    (an n-gram drafter may propose fewer than K tokens, so the two need not agree).
    ``unique_bigrams`` is the share of distinct token bigrams in the outputs (low = looping).
    """

    name: str
    requests: int
    ok: int
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted: float | None = None
    rate: float | None = None
    length: float | None = None
    per_position: list[float] = field(default_factory=list)
    unique_bigrams: float | None = None
    median_step_ms: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class Measurements(AsDict):
    """Everything the suite measured on the live server."""

    overall: Arm
    categories: list[Arm]
    raw: Arm | None
    thinking_on: Arm | None
    thinking_off: Arm | None
    template_has_thinking: bool | None
    serving_temperature: float
    temperature_source: str
    at_temperature: Arm | None


@dataclass(frozen=True)
class StepCost(AsDict):
    """A speculative step's time against a plain decode step, and the speedup that predicts.

    ``ratio`` = median time per engine step of this run / median time per token of the baseline
    (both at concurrency 1). ``per_draft`` = (ratio - 1) / K, the cost one more drafted token adds.
    """

    step_ms: float | None
    plain_ms: float | None
    baseline_run: str | None
    ratio: float | None
    per_draft: float | None
    estimated_speedup: float | None
    measured_speedup: float | None
    recommended_k: int | None
    estimate_by_k: dict[int, float] = field(default_factory=dict)
    note: str = ""


@dataclass(frozen=True)
class DrafterIdentity(AsDict):
    """``fingerprint``: the trained weights; ``settings``: what the config tells the engine to do with them."""

    fingerprint: str
    settings: dict[str, str] = field(default_factory=dict)

    def changed(self, other: DrafterIdentity) -> list[str]:
        """``key: before -> now`` for each setting that differs from ``other`` (an earlier run)."""
        keys = sorted(set(self.settings) | set(other.settings))
        return [f"{k}: {other.settings.get(k, 'unset')} -> {self.settings.get(k, 'unset')}"
                for k in keys if self.settings.get(k) != other.settings.get(k)]


@dataclass(frozen=True)
class OtherTarget(AsDict):
    """The best earlier diagnosed run of the same drafter weights on other target weights: evidence
    about the pairing, never a reference (a drafter is trained on one target's hidden states).

    ``target``: that run's target fingerprint (None: recorded before fingerprints, told apart by its path);
    ``changed``: the drafter settings that differ since (``key: before -> now``).
    """

    run: str
    date: str
    target_path: str
    target: TargetIdentity | None
    rate: float
    per_position: list[float] = field(default_factory=list)
    drafts: float | None = None
    k: int | None = None
    changed: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Provenance(AsDict):
    """What the drafter's own files say it was trained for (``drafter/provenance.py``), against the served target.

    ``names``: the target as the training recorded it (a path or hub id) and where (``README.md base_model``,
    ``training_args.json target_model_path``, ...); ``fingerprint``: the target fingerprint the training
    recorded, when it did; ``matches``: True / False against the served target, None when it cannot be told.
    """

    names: list[str] = field(default_factory=list)
    fingerprint: str = ""
    matches: bool | None = None
    why: str = ""


@dataclass(frozen=True)
class ReferenceMatch(AsDict):
    """Where this run stands against a reference (or why none applies).

    ``kind``: ``local`` (the best earlier run of the same drafter weights on this target and
    engine, from servelab's history), ``stated`` (the experiment's ``expected_acceptance``) or
    ``published`` (a published figure for the drafter's family). A local reference keeps its
    per-position curve (compared over the positions both runs drafted) and the drafter settings
    that changed since (``changed``: ``key: before -> now``).
    """

    applies: bool
    label: str
    figure: str
    low: float | None
    high: float | None
    source: str
    why: str
    kind: str = "published"
    run: str | None = None
    per_position: list[float] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    #: A local reference's draft steps (each drafts one token at each position): the fall's significance.
    drafts: float | None = None
    #: A local reference run's own findings (their keys, notes left out): what the drafter showed as trained.
    shows: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Diagnosis:
    """The saved result: identity, measurements, the cost model, the reference and ranked findings."""

    run: str
    experiment: str
    engine: str
    method: str
    k: int | None
    date: str
    measurements: Measurements
    cost: StepCost
    reference: ReferenceMatch
    findings: list[Finding]
    seconds: float
    #: The drafter checks run beside the suite (None: not run, e.g. n-gram or unavailable).
    static: list[StaticCheck] | None = None
    #: The drafter's weights fingerprint and its config settings (None: no readable checkpoint).
    drafter: DrafterIdentity | None = None
    #: The served target's fingerprint (None: not a readable safetensors folder): references are by pair.
    target: TargetIdentity | None = None
    #: This drafter's best run on other target weights (evidence about the pairing; None: none known).
    other_target: OtherTarget | None = None
    #: What the drafter's files say it was trained for (None: they say nothing).
    provenance: Provenance | None = None

    @property
    def top(self) -> Finding | None:
        return self.findings[0] if self.findings else None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["format"] = FORMAT
        return out


def rank(findings: list[Finding]) -> list[Finding]:
    """Errors first, then warnings, then notes; within a severity the heavier finding first."""
    return sorted(findings, key=lambda f: (SEVERITY_ORDER[f.severity], -f.weight, f.code))


def from_dict(data: dict[str, Any]) -> Diagnosis:
    """Read a ``diagnosis.json`` back (raises KeyError/TypeError/ValueError on a foreign file)."""
    if data.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} file (format {data.get('format')!r})")

    def arm(d: dict[str, Any] | None) -> Arm | None:
        return None if d is None else Arm(**d)

    m = data["measurements"]
    overall = arm(m["overall"])
    assert overall is not None
    meas = Measurements(
        overall=overall,
        categories=[Arm(**c) for c in m["categories"]],
        raw=arm(m["raw"]),
        thinking_on=arm(m["thinking_on"]),
        thinking_off=arm(m["thinking_off"]),
        template_has_thinking=m["template_has_thinking"],
        serving_temperature=float(m["serving_temperature"]),
        temperature_source=str(m["temperature_source"]),
        at_temperature=arm(m["at_temperature"]),
    )
    c = dict(data["cost"])
    c["estimate_by_k"] = {int(k): float(v) for k, v in (c.get("estimate_by_k") or {}).items()}
    return Diagnosis(
        run=str(data["run"]),
        experiment=str(data["experiment"]),
        engine=str(data["engine"]),
        method=str(data["method"]),
        k=data["k"],
        date=str(data["date"]),
        measurements=meas,
        cost=StepCost(**c),
        reference=ReferenceMatch(**data["reference"]),
        findings=[Finding(**f) for f in data["findings"]],
        seconds=float(data["seconds"]),
        static=None if data.get("static") is None else [StaticCheck(**c) for c in data["static"]],
        drafter=None if not data.get("drafter") else DrafterIdentity(**data["drafter"]),
        target=TargetIdentity.of(data.get("target")),
        other_target=_other_target(data.get("other_target")),
        provenance=None if not data.get("provenance") else Provenance(**data["provenance"]),
    )


def _other_target(d: dict[str, Any] | None) -> OtherTarget | None:
    if not d:
        return None
    return OtherTarget(**{**d, "target": TargetIdentity.of(d.get("target"))})
