"""``servelab ab BASE CAND``: a paired measurement of a candidate against its baseline.

Two probes taken apart compare two moments as much as two servers: the host's load moves between
them, and the noise band of each probe (its repeats) says nothing about that. Here both servers are
timed in rounds of the same prompts and settings (the candidate's ``[probe]``), and each round of
the candidate is paired with the baseline's round next to it:

- **interleaved**, when both servers are up: A B, B A, A B, B A ... (an ABBA order, so a load that
  rises or falls through the measurement weighs on both sides alike);
- **back to back**, when they are not both up (one GPU host, one big model each): each side that is
  not serving is launched, timed right after its load, and stopped again (a side that is up is timed
  as it is and left up); round i of A is paired with round i of B, and the result says so.

The speedup is the geometric mean of the per-pair ratios (candidate / baseline output tok/s) and its
band the 95 % t-interval of their logarithms: ``1.18x (1.10-1.27, 95% interval over 6 pairs)``. Each
round keeps the host's conditions (``conditions.RoundConditions``). The result is ``ab.json`` in
the candidate's run folder, where ``compare`` finds it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import httpx

from servelab.engines.errors import ServelabError
from servelab.engines.probe.conditions import RoundConditions, median
from servelab.engines.probe.runner import Progress, time_round, wait_ready
from servelab.engines.adapters.exchange import AsDict

if TYPE_CHECKING:
    from servelab.engines.catalog.experiment import ProbeSettings
    from servelab.engines.probe.timer import HostTimer
    from servelab.engines.runs.records import ResolvedRun, RunsAPI
    from servelab.engines.adapters.exchange import PromptSet

AB_JSON = "ab.json"
FORMAT = "servelab-ab/1"
INTERLEAVED, BACK_TO_BACK = "interleaved", "back to back"
#: The same bars as compare's verdict.
HELPS_ABOVE, HURTS_BELOW = 1.10, 1.00
#: A paired verdict names the host busy when a median of this many runnable tasks per CPU wanted one.
BUSY_QUEUE = 2.0
#: Two-sided 97.5 % quantiles of Student's t by degrees of freedom (1-30); 1.96 beyond.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(df: int) -> float:
    return _T975[df - 1] if 1 <= df <= len(_T975) else 1.96


def ratio_interval(ratios: list[float]) -> tuple[float, float, float]:
    """(geometric mean, low, high): the 95 % t-interval of the mean log ratio, back in ratios.
    One pair has no spread to measure: its interval is the ratio itself."""
    logs = [math.log(r) for r in ratios if r > 0]
    if not logs:
        raise ServelabError("no pair has an output throughput on both sides")
    n = len(logs)
    m = sum(logs) / n
    if n < 2:
        return math.exp(m), math.exp(m), math.exp(m)
    sd = math.sqrt(sum((x - m) ** 2 for x in logs) / (n - 1))
    half = t975(n - 1) * sd / math.sqrt(n)
    return math.exp(m), math.exp(m - half), math.exp(m + half)


def abba(pairs: int) -> list[str]:
    """The order of each pair's two rounds: AB, BA, AB, BA ... (A B B A A B B A)."""
    return ["AB" if i % 2 == 0 else "BA" for i in range(pairs)]


@dataclass(frozen=True)
class PairedRound(AsDict):
    pair: int
    order: str
    base_tput: float
    cand_tput: float
    base_at: float
    cand_at: float
    base: RoundConditions
    cand: RoundConditions

    @property
    def ratio(self) -> float:
        return self.cand_tput / self.base_tput if self.base_tput > 0 else math.nan


@dataclass(frozen=True)
class PairedResult(AsDict):
    """A paired measurement: the rounds, the speedup and its interval, and how it was taken."""

    base_run: str
    cand_run: str
    mode: str
    host: str
    prompt_set: str
    prompt_set_hash: str
    max_tokens: int
    concurrency: int
    rounds: list[PairedRound]
    date: str
    note: str = ""
    format: str = FORMAT
    cross_host: str = ""

    @property
    def ratios(self) -> list[float]:
        return [r.ratio for r in self.rounds if not math.isnan(r.ratio)]

    @property
    def band(self) -> tuple[float, float, float]:
        return ratio_interval(self.ratios)

    @property
    def verdict(self) -> str:
        _, low, high = self.band
        return "helps" if low > HELPS_ABOVE else "hurts" if high < HURTS_BELOW else "inconclusive"

    def how(self) -> str:
        """``6 pairs interleaved A B B A on host local`` or ``6 pairs back to back ..., and why``."""
        n = len(self.ratios)
        how = f"{n} pair{'s' if n != 1 else ''} {'interleaved A B B A' if self.mode == INTERLEAVED else 'back to back'}"
        how += f" on {self.host}" if not self.cross_host else f" ({self.cross_host})"
        if busy := self.busy():
            how += f"; {busy}"
        return how + (f"; {self.note}" if self.note else "")

    def busy(self) -> str:
        """``host busy: a median 12.8 tasks wanted its 2 CPUs`` when, over every side of every round, the
        median count of runnable tasks was at least twice the host's CPUs ("" otherwise, or unknown).
        Pairing cancels a load both sides share; it does not make a starved host's answer a quiet
        host's (speculation spends compute to save steps), so the verdict names the load it ran under."""
        sides = [side for r in self.rounds for side in (r.base, r.cand)]
        queue = median([s.runnable for s in sides if s.runnable is not None])
        cpus = max((s.cpus for s in sides if s.cpus), default=None)
        if queue is None or cpus is None or queue < BUSY_QUEUE * cpus:
            return ""
        return f"host busy: a median {queue:.1f} tasks wanted its {cpus} CPU{'s' if cpus != 1 else ''}"

    def figure(self) -> str:
        """``1.18x (1.10-1.27, 95% interval of 6 per-pair ratios)``."""
        value, low, high = self.band
        return f"{value:.2f}x ({low:.2f}-{high:.2f}, 95% interval of {len(self.ratios)} per-pair ratios)"

    def line(self, words: str) -> str:
        """The paired verdict as one sentence; ``words``: compare's plain reading of the band."""
        return f"{self.cand_run}: PAIRED {self.verdict.upper()} vs {self.base_run}: speedup {self.figure()}; {words}; {self.how()}"


def from_dict(data: dict[str, Any]) -> PairedResult:
    """``ab.json`` read back (KeyError/TypeError/ValueError on a foreign file)."""
    if data.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} file")
    rounds = [
        PairedRound(**{**r, "base": RoundConditions(**r["base"]), "cand": RoundConditions(**r["cand"])})
        for r in data["rounds"]
    ]
    return PairedResult(**{**data, "rounds": rounds})


# -- measuring -----------------------------------------------------------------------------------------
@dataclass
class _Side:
    """One server being timed: its run, its timer on its host, its served model."""

    run: ResolvedRun
    timer: HostTimer
    http: httpx.AsyncClient
    model: str = ""
    conditions: Any = None


async def _side(runs: RunsAPI, target: ResolvedRun, http_timeout: float) -> _Side:
    from servelab.engines.probe.artifacts import gpu_names, host_conditions
    from servelab.engines.probe.timer import HostTimer

    rec = target.record
    head = target.head
    timer = HostTimer(head.host, head.host.config.python, f"http://127.0.0.1:{rec.port}", watch_sid=rec.pid)
    http = httpx.AsyncClient(base_url=await runs.base_url(head), timeout=httpx.Timeout(http_timeout, connect=10.0), trust_env=False)
    # each round's GPU utilisation and memory where the host has GPUs, as a plain probe records them
    side = _Side(target, timer, http, conditions=host_conditions(runs, target.host, rec, bool(await gpu_names(target.host))))
    return side


async def _ready(side: _Side, settings: ProbeSettings, prompts: PromptSet, say: Progress) -> None:
    side.model = await wait_ready(side.http, 900.0, say)
    from servelab.engines.probe.client import stream_chat

    for i in range(max(1, settings.warmup)):  # the same warm-up on both sides
        warm = await stream_chat(side.http, side.model, prompts.prompts[i % len(prompts)], min(settings.max_tokens, 32))
        if not warm.ok:
            raise ServelabError(f"warm-up request to {side.run.run_id} failed: {warm.error}")


async def _round(side: _Side, prompts: PromptSet, settings: ProbeSettings, timeout_s: float) -> tuple[float, float, RoundConditions]:
    at = time.time()
    timed = await time_round(side.timer, side.model, prompts, settings.max_tokens, settings.concurrency, {}, timeout_s)
    failed = [r for r in timed.results if not r.ok]
    if failed:
        raise ServelabError(f"{len(failed)} request(s) to {side.run.run_id} failed in a paired round: {failed[0].error}")
    out = sum(r.output_tokens for r in timed.results)
    tput = out / timed.duration_s if timed.duration_s > 0 else 0.0
    cond = await side.conditions(timed.conditions) if side.conditions is not None else timed.conditions
    return tput, at, cond


async def measure(
    runs: RunsAPI, base: str, cand: str, *, pairs: int = 6, progress: Progress | None = None, request_timeout_s: float = 300.0,
) -> PairedResult:
    """Time ``cand`` against ``base`` in paired rounds (interleaved when both serve, else back to back)
    and save ``ab.json`` in the candidate's folder. ``base``/``cand``: run ids, or experiment names
    (their latest run, launched when it does not serve)."""
    from servelab.engines.probe.artifacts import run_experiment
    from servelab.engines.probe.prompts import load as load_prompts

    say = progress or (lambda _m: None)
    if pairs < 1:
        raise ServelabError("ab needs at least one pair of rounds")
    sides = [await _find(runs, base), await _find(runs, cand)]
    alive = [t is not None and (await runs.status(t.head, analyze=False)).alive for t in sides]
    cand_exp = runs.catalog.get(cand).experiment if sides[1] is None else await run_experiment(runs, sides[1].record, sides[1].head)
    settings = cand_exp.probe
    prompts = load_prompts(settings.prompts, base=runs.catalog.folder)
    if all(alive):
        targets = [t for t in sides if t is not None]
        result = await _interleaved(runs, targets[0], targets[1], prompts, settings, pairs, say, request_timeout_s)
    else:
        names = [base, cand]
        down = [names[i] for i in range(2) if not alive[i]]
        note = f"not both up ({', '.join(down)} not serving): each timed right after its load, one at a time"
        result = await _back_to_back(runs, names, sides, alive, prompts, settings, pairs, say, request_timeout_s, note)
    import json

    head = (await runs.resolve(result.cand_run)).head
    await runs.write_artifact(head, AB_JSON, (json.dumps(result.to_dict(), indent=1) + "\n").encode())
    return result


async def _find(runs: RunsAPI, name: str) -> ResolvedRun | None:
    """The run ``name`` names: an experiment's latest run (None: it has none), else the run id."""
    if name not in {e.name for e in runs.catalog.experiments}:
        return await runs.resolve(name)
    listed = [r for r in await runs.list() if r.experiment == name and not r.rehearsal]  # a rehearsal is never the latest run
    if not listed:
        return None
    latest = max(listed, key=lambda r: (r.started_at, r.id))
    return await runs.resolve(latest.id)


def _result(base: ResolvedRun, cand: ResolvedRun, mode: str, prompts: PromptSet, settings: ProbeSettings,
            rounds: list[PairedRound], note: str = "") -> PairedResult:
    bh, ch = base.head.host.name, cand.head.host.name
    return PairedResult(
        base.run_id, cand.run_id, mode, ch, prompts.name, prompts.hash, settings.max_tokens, settings.concurrency, rounds,
        datetime.now(UTC).strftime("%Y%m%d-%H%M%S"), note, cross_host="" if bh == ch else f"baseline on {bh}, candidate on {ch}",
    )


async def _interleaved(runs: RunsAPI, base: ResolvedRun, cand: ResolvedRun, prompts: PromptSet, settings: ProbeSettings,
                       pairs: int, say: Progress, timeout_s: float) -> PairedResult:
    a, b = await _side(runs, base, timeout_s), await _side(runs, cand, timeout_s)
    try:
        await _ready(a, settings, prompts, say)
        await _ready(b, settings, prompts, say)
        rounds: list[PairedRound] = []
        for i, order in enumerate(abba(pairs)):
            got: dict[str, tuple[float, float, RoundConditions]] = {}
            for which in order:
                got[which] = await _round(a if which == "A" else b, prompts, settings, timeout_s)
            (ta, at_a, ca), (tb, at_b, cb) = got["A"], got["B"]
            rounds.append(PairedRound(i, order, ta, tb, at_a, at_b, ca, cb))
            say(f"pair {i + 1}/{pairs} ({' '.join(order)}): {ta:.1f} vs {tb:.1f} output tok/s = {tb / ta if ta else math.nan:.2f}x")
    finally:
        await a.http.aclose()
        await b.http.aclose()
    return _result(base, cand, INTERLEAVED, prompts, settings, rounds)


async def _back_to_back(runs: RunsAPI, names: list[str], sides: list[ResolvedRun | None], alive: list[bool], prompts: PromptSet,
                        settings: ProbeSettings, pairs: int, say: Progress, timeout_s: float, note: str) -> PairedResult:
    from servelab.engines.probe.artifacts import wait_for_ready

    timed: dict[int, tuple[ResolvedRun, list[tuple[float, float, RoundConditions]]]] = {}
    for i in sorted(range(2), key=lambda j: not alive[j]):  # a side that serves first, as it is
        target = sides[i]
        launched = False
        if not alive[i]:
            experiment = target.record.experiment if target is not None else names[i]
            say(f"launching {experiment} (the other side cannot be up at the same time)")
            rec = await runs.launch(experiment)
            target, launched = await runs.resolve(rec.id), True
            await wait_for_ready(runs, target)
        assert target is not None
        side = await _side(runs, target, timeout_s)
        rounds: list[tuple[float, float, RoundConditions]] = []
        try:
            await _ready(side, settings, prompts, say)
            for r in range(pairs):
                rounds.append(await _round(side, prompts, settings, timeout_s))
                say(f"{target.run_id} round {r + 1}/{pairs}: {rounds[-1][0]:.1f} output tok/s")
        finally:
            await side.http.aclose()
            if launched:
                await runs.stop(target.head)
        timed[i] = (target, rounds)
    (base_t, base_r), (cand_t, cand_r) = timed[0], timed[1]
    paired = [PairedRound(i, "AB" if base_r[0][1] <= cand_r[0][1] else "BA", ra[0], rb[0], ra[1], rb[1], ra[2], rb[2])
              for i, (ra, rb) in enumerate(zip(base_r, cand_r, strict=True))]
    return _result(base_t, cand_t, BACK_TO_BACK, prompts, settings, paired, note)


async def load_paired(runs: RunsAPI, run: str | ResolvedRun) -> PairedResult | None:
    """The run's stored ``ab.json`` (None when it has none or cannot be read)."""
    import json

    target = await runs.resolve(run)
    raw = await runs.read_artifact(target.head, AB_JSON)
    if raw is None:
        return None
    try:
        return from_dict(json.loads(raw.decode("utf-8")))
    except (ValueError, KeyError, TypeError):
        raise ServelabError(f"run {target.asked}: {AB_JSON} is not a paired measurement servelab can read") from None
