"""``servelab compare A B --align``: write the aligned twin of each run whose engine's resolved
settings differ from the first run's in a way that moves throughput (``engines.verdict.fairness``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from servelab.engines.adapters.base import get_adapter
from servelab.engines.errors import ServelabError
from servelab.engines.verdict.fairness import aligned_twin, need_tokens, not_comparable

if TYPE_CHECKING:
    from servelab.engines.runs.records import RunsAPI


@dataclass(frozen=True)
class Twin:
    run: str
    path: Path
    why: str
    #: Differences the engine has no argument for (the twin leaves them).
    left: list[str]


async def write_twins(runs: RunsAPI, run_ids: list[str]) -> list[Twin]:
    """For each run after the first that is not comparable with it, ``<experiment>-aligned.toml`` in the
    experiments folder: its definition with the differing settings set to the first run's."""
    from servelab.engines.probe.artifacts import load_probe

    probes = []
    for run_id in run_ids:
        probe = await load_probe(runs, run_id)
        if probe is None:
            raise ServelabError(f"run {run_id} has no probe results (run 'servelab probe {run_id}' while it serves)")
        probes.append(probe)
    first = probes[0].identity.get("resolved_settings") or {}
    out: list[Twin] = []
    for run_id, probe in zip(run_ids[1:], probes[1:], strict=True):
        mine = probe.identity.get("resolved_settings") or {}
        need = need_tokens(probes[0].max_concurrency, [first, mine], probes[0].max_tokens)
        why = not_comparable(mine, first, need)
        if not why:
            continue
        target = await runs.resolve(run_id)
        exp_name = target.record.experiment
        try:
            source = runs.catalog.get(exp_name).text  # the definition as written (its relative paths)
        except ServelabError:
            raw = await runs.read_artifact(target.head, "experiment.toml")
            if raw is None:
                raise ServelabError(f"run {run_id}: its experiment {exp_name} is neither in the catalog nor in the run's folder") from None
            source = raw.decode("utf-8")
        name = f"{exp_name}-aligned"
        text, left = aligned_twin(source, get_adapter(str(probe.engine)).settings, mine, first, name, need)
        path = Path(runs.catalog.folder) / f"{name}.toml"
        path.write_text(text, encoding="utf-8")
        out.append(Twin(run_id, path, why, left))
    return out
