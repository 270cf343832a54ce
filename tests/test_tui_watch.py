"""The run watcher (engines/runs/watch.py) on a real replayed run, without the app around it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest

from servelab.engines.catalog.folder import load_catalog
from servelab.engines.runs.records import RunRecord, RunStatus
from servelab.engines.runs.manager import Runs
from servelab.engines.runs.state import RunState
from tests.fixtures.runlab import until
from tests.fixtures.tui import SHARED_LOGS, TuiFolder
from servelab.engines.runs import watch
from servelab.engines.runs.watch import RunWatcher

NGRAM_SERVE = SHARED_LOGS / "vllm-cpu-ngram-startup-and-serve.log"


class FakeRunsFailingOnceAtReady(Runs):
    """Real ``Runs``, except that ``status`` raises a plain RuntimeError once: the first time the
    run reads ready, so the follower dies holding the very news it should announce (a bug in a
    follower, not a host down: nothing in the watcher expects it)."""

    failures = 0

    async def status(self, run_id: str, *, analyze: bool = True) -> RunStatus:
        status = await super().status(run_id, analyze=analyze)
        analysis = status.analysis
        if not self.failures and analysis is not None and (analysis.state is RunState.READY or analysis.was_ready):
            self.failures += 1
            raise RuntimeError("status broke once")
        return status


class FakeRunsListingFailsOnce(Runs):
    """Real ``Runs``, except that the first ``list`` raises a plain RuntimeError (a bug in the
    listing, not a host down)."""

    failures = 0

    async def list(self, host: str | None = None) -> list[RunRecord]:
        if not self.failures:
            self.failures += 1
            raise RuntimeError("listing broke once")
        return await super().list(host)


@pytest.fixture
def fast_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watcher lists every 0.3 s and polls every 0.2 s."""
    monkeypatch.setattr(watch, "LIST_SECONDS", 0.3)
    monkeypatch.setattr(watch, "POLL_SECONDS", 0.2)


async def _watch_replay(tui_folder: TuiFolder, runs: Runs) -> tuple[str, list[tuple[str, str, str, str]], list[tuple[str, BaseException]]]:
    """Watch the n-gram replay with a bare RunWatcher until it announces something: (run id, announced, failed).
    The log starts only once the watcher has seen the run, so its ready is news."""
    gate = tui_folder.workdir / "go"
    run_id = tui_folder.replay("tiny-cpu-vllm-ngram", NGRAM_SERVE, rate=400, hold_s=30.0, gate=gate)
    announced: list[tuple[str, str, str, str]] = []
    failed: list[tuple[str, BaseException]] = []
    watcher = RunWatcher(lambda: runs, lambda *event: announced.append(event), lambda rid, exc: failed.append((rid, exc)))
    task = asyncio.create_task(watcher.run_forever())
    try:
        await until(lambda: watcher.has_seen(run_id), timeout=60)
        gate.touch()
        await until(lambda: bool(announced), timeout=60)
    finally:
        task.cancel()
        watcher.cancel()
    return run_id, announced, failed


async def test_a_follower_that_fails_is_reported_started_again_and_the_run_still_announced_ready(
    tui_folder: TuiFolder, monkeypatch: pytest.MonkeyPatch, fast_watch: None
) -> None:
    runs = FakeRunsFailingOnceAtReady(load_catalog(tui_folder.folder))
    run_id, announced, failed = await _watch_replay(tui_folder, runs)
    assert runs.failures == 1
    assert [(rid, type(exc), str(exc)) for rid, exc in failed] == [(run_id, RuntimeError, "status broke once")]
    assert announced == [(run_id, "tiny-cpu-vllm-ngram", "ready", "")]


async def test_the_dashboard_warns_once_when_a_follower_fails_and_still_says_ready(
    tui_folder: TuiFolder, monkeypatch: pytest.MonkeyPatch, fast_watch: None
) -> None:
    from tests.fixtures.tui import wait_for
    from servelab.tui.app import ServelabApp

    runs = FakeRunsFailingOnceAtReady(load_catalog(tui_folder.folder))
    gate = tui_folder.workdir / "go"
    run_id = tui_folder.replay("tiny-cpu-vllm-ngram", NGRAM_SERVE, rate=400, hold_s=30.0, gate=gate)
    app = ServelabApp(tui_folder.folder)
    monkeypatch.setattr(app, "runs", lambda: runs)  # every part of the app asks this one Runs
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_for(pilot, lambda: app.watcher is not None and app.watcher.has_seen(run_id))
        gate.touch()
        await wait_for(pilot, lambda: any(n.title == "run ready" for n in app._notifications))
        warnings = [n for n in app._notifications if n.title == "run watcher"]
        assert len(warnings) == 1 and warnings[0].severity == "warning"
        assert run_id in warnings[0].message and "RuntimeError: status broke once" in warnings[0].message


async def test_a_listing_that_fails_is_reported_once_and_the_watcher_keeps_listing(
    tui_folder: TuiFolder, monkeypatch: pytest.MonkeyPatch, fast_watch: None
) -> None:
    runs = FakeRunsListingFailsOnce(load_catalog(tui_folder.folder))
    run_id, announced, failed = await _watch_replay(tui_folder, runs)
    assert [(rid, str(exc)) for rid, exc in failed] == [("", "listing broke once")]
    assert [(rid, event) for rid, _exp, event, _detail in announced] == [(run_id, "ready")]


def _own(tui_folder: TuiFolder, run_id: str, **fields: object) -> None:
    """Set owner fields in a replayed run's run.json (as a launch by that user would have written them)."""
    path = tui_folder.workdir / "runs" / run_id / "run.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


async def test_a_dashboard_announces_only_its_own_users_runs_and_never_a_rehearsal(tui_folder: TuiFolder, fast_watch: None) -> None:
    """Alice's run and Alice's rehearsal turn ready under two watchers, Alice's and Bob's: Alice's
    announces her run alone (bell, toast, probe on ready hang on it); Bob's announces nothing, yet
    follows both (his views still refresh on them)."""
    from servelab.engines.hosts.owner import Owner

    gate = tui_folder.workdir / "go"
    run = tui_folder.replay("tiny-cpu-vllm-ngram", NGRAM_SERVE, rate=400, hold_s=30.0, gate=gate)
    rehearsal = tui_folder.replay("tiny-cpu-vllm-ngram", NGRAM_SERVE, rate=400, hold_s=30.0, gate=gate, port=18998)
    _own(tui_folder, run, launched_by="alice", launched_from="m1")
    _own(tui_folder, rehearsal, launched_by="alice", launched_from="m1", rehearsal=True)
    heard: dict[str, list[tuple[str, str, str, str]]] = {"alice": [], "bob": []}

    def announce(who: str) -> Callable[[str, str, str, str], None]:
        return lambda *event: heard[who].append(event)

    watchers = {
        who: RunWatcher(lambda: Runs(load_catalog(tui_folder.folder)), announce(who), lambda rid, exc: None, owner=Owner(who, "m2"))
        for who in heard
    }
    tasks = [asyncio.create_task(w.run_forever()) for w in watchers.values()]
    try:
        await until(lambda: all(w.has_seen(run) and w.has_seen(rehearsal) for w in watchers.values()), timeout=60)
        gate.touch()
        await until(lambda: all(w.analyses.get(r) is not None and w.analyses[r].was_ready for w in watchers.values() for r in (run, rehearsal)), timeout=60)
        await until(lambda: bool(heard["alice"]), timeout=60)
    finally:
        for t in tasks:
            t.cancel()
        for w in watchers.values():
            w.cancel()
    assert heard["alice"] == [(run, "tiny-cpu-vllm-ngram", "ready", "")]
    assert heard["bob"] == []


async def test_a_run_started_after_the_dashboard_opened_is_news_even_when_ready_by_its_first_listing(tui_folder: TuiFolder, fast_watch: None) -> None:
    """A server that is ready before the watcher's next listing (a small model loads in seconds) is
    still announced when it started after the watcher opened; a run already ready when the watcher
    opened stays history."""
    import datetime as dt

    from servelab.engines.runs.records import LOG_NAME

    announced: list[tuple[str, str, str, str]] = []
    watcher = RunWatcher(lambda: Runs(load_catalog(tui_folder.folder)), lambda *event: announced.append(event), lambda rid, exc: None)
    opened = dt.datetime.fromtimestamp(watcher.opened, dt.timezone.utc)
    before = (opened - dt.timedelta(seconds=5)).isoformat(timespec="seconds")
    after = (opened + dt.timedelta(seconds=1)).isoformat(timespec="seconds")
    old = tui_folder.replay("tiny-cpu-vllm-ngram", NGRAM_SERVE, hold_s=60.0, started_at=before)
    new = tui_folder.replay("tiny-cpu-vllm-baseline", NGRAM_SERVE, hold_s=60.0, started_at=after, port=18997)
    logs = [tui_folder.workdir / "runs" / r / LOG_NAME for r in (old, new)]
    await until(lambda: all(p.exists() and b"Application startup complete" in p.read_bytes() for p in logs), timeout=60)
    task = asyncio.create_task(watcher.run_forever())  # its first listing finds both ready already
    try:
        await until(lambda: watcher.has_ruled(old, "ready") and watcher.has_ruled(new, "ready"), timeout=60)
    finally:
        task.cancel()
        watcher.cancel()
    assert [(rid, event) for rid, _exp, event, _detail in announced] == [(new, "ready")]
