"""The GPU sampler and engines/gpus on nvidia-smi answers recorded on a real H200, replayed by
FakeNvidiaSmi (this machine has no GPU). Processes named in the recording are mapped to live
processes started here, so the holders are classified from a real /proc."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.engines.gpus.holders import RunProcesses, held_by, holder, run_memory
from servelab.engines.gpus.parse import GpuSampleError, from_json, parse_line, parse_output
from servelab.engines.gpus.readings import GpuFigures, GpuTrack, LoadWatch, release
from servelab.engines.gpus.sample import sample_host
from servelab.engines.gpus.stream import GpuStream
from servelab.engines.gpus.inventory import Holder, HostGpus
from servelab.engines.hosts.local import LocalHost
from servelab.engines.hosts.hostsfile import HostConfig
from servelab.engines.hosts.owner import me
from tests.fixtures.gpus import RECORDED, RECORDED_OTHER_PID, RECORDED_PID, fake_smi, fake_smi_env

__all__ = ["fake_smi"]
SAMPLER = Path(__file__).resolve().parent.parent / "engines" / "helpers" / "gpusample.py"
UUID = "GPU-95e27d26-9e81-34c3-d01e-3f722d7dd4cf"


def sampler(env: dict[str, str], *args: str, timeout: float = 20) -> list[HostGpus]:
    done = subprocess.run([sys.executable, str(SAMPLER), *args], env={**os.environ, **env}, capture_output=True, timeout=timeout, check=True)
    return parse_output("h200", done.stdout)


@pytest.fixture
def procs() -> Iterator[tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]]:
    """A stand-in for a run's engine (own process group, the servelab marker) and a foreign process."""
    mine = subprocess.Popen(["sleep", "60"], env={**os.environ, "SERVELAB_RUN_ID": "r-gpu-1"}, start_new_session=True)
    other = subprocess.Popen(["sleep", "60"])
    yield mine, other
    for p in (mine, other):
        p.kill()
        p.wait()


def test_cpu_host_says_no_gpu_once() -> None:
    env = {"PATH": "/usr/bin:/bin"}
    (only,) = sampler(env, "--count", "0", "--interval", "0.1")  # a watch too: one answer, then it exits
    assert only.gpu is False and "nvidia-smi" in only.reason
    (broken,) = sampler(fake_smi_env("", "", fail="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."))
    assert broken.gpu is False and broken.reason.startswith("NVIDIA-SMI has failed")


def test_recorded_idle_h200() -> None:
    (s,) = sampler(fake_smi_env("idle-gpus.csv", "idle-apps.csv"))
    assert s.gpu and s.processes == ()
    (g,) = s.gpus
    assert (g.index, g.uuid, g.name, g.memory_used_mib, g.memory_total_mib, g.pstate) == (0, UUID, "NVIDIA H200", 0, 143771, "P0")
    assert g.power_w == 83.25 and g.used_fraction == 0.0


def test_holders_this_run_foreign_and_other_run(procs: tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]) -> None:
    mine, other = procs
    (s,) = sampler(fake_smi_env("two-gpus.csv", "two-apps.csv", {RECORDED_PID: mine.pid, RECORDED_OTHER_PID: other.pid}))
    by_pid = {p.pid: p for p in s.processes}
    assert by_pid[mine.pid].run_id == "r-gpu-1" and by_pid[mine.pid].pgid == mine.pid and by_pid[mine.pid].used_mib == 10852
    assert by_pid[other.pid].run_id is None and by_pid[other.pid].cmd == "sleep 60"
    run = RunProcesses(ids=frozenset({"r-gpu-1"}))
    assert holder(by_pid[mine.pid], run) is Holder.THIS_RUN
    assert holder(by_pid[other.pid], run) is Holder.FOREIGN
    # by process group alone (a child that dropped the marker), and from another run's point of view
    assert holder(by_pid[mine.pid], RunProcesses(pgids=frozenset({mine.pid}))) is Holder.THIS_RUN
    assert holder(by_pid[mine.pid], RunProcesses(ids=frozenset({"r-other"}))) is Holder.OTHER_RUN
    labels = [h.label for h in held_by(s, run)]
    assert labels[0] == f"pid {mine.pid} python3 10852 MiB (this run)" and labels[1].endswith("(foreign)")
    assert run_memory(s, run) == {UUID: 10852}


def test_watch_follows_a_changing_gpu(tmp_path: Path) -> None:
    """The watch (one nvidia-smi -lms loop) sees the answer change: idle, then held."""
    gpus, apps = tmp_path / "gpus.csv", tmp_path / "apps.csv"
    gpus.write_text((RECORDED / "idle-gpus.csv").read_text())
    apps.write_text((RECORDED / "idle-apps.csv").read_text())
    env = {**fake_smi_env("", ""), "FAKE_SMI_GPUS": str(gpus), "FAKE_SMI_APPS": str(apps)}
    proc = subprocess.Popen([sys.executable, str(SAMPLER), "--count", "0", "--interval", "0.1"], env={**os.environ, **env}, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    try:
        first = parse_line("h200", proc.stdout.readline())
        apps.write_text((RECORDED / "held-apps.csv").read_text())
        gpus.write_text((RECORDED / "held-gpus.csv").read_text())
        deadline = time.monotonic() + 10
        seen = first
        while seen.gpus[0].memory_used_mib == 0 and time.monotonic() < deadline:
            seen = parse_line("h200", proc.stdout.readline())
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0  # ends its nvidia-smi loop and exits cleanly
    assert first.gpus[0].memory_used_mib == 0 and first.processes == ()
    assert seen.gpus[0].memory_used_mib == 10861 and [p.used_mib for p in seen.processes] == [10852]


def test_held_gpu_lock_names_its_campaign(tmp_path: Path) -> None:
    (tmp_path / "gpus-holder-0-1.json").write_text(json.dumps({"campaign": "sweep-1", "pid": 4242, "load": 0, "since": "2026-12-03T06:00:00"}))
    (tmp_path / "gpu-2.lock").write_text("")  # a lock nobody holds now
    with open(tmp_path / "gpu-0.lock", "a+") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        (s,) = sampler(fake_smi_env("idle-gpus.csv", "idle-apps.csv"), "--locks", str(tmp_path))
    assert [(k.gpus, k.campaign, k.pid) for k in s.locks] == [("0", "sweep-1", 4242)]


def test_sample_host_through_the_host_scripts(tmp_path: Path, fake_smi: Callable[..., None]) -> None:
    fake_smi("held-gpus.csv", "idle-apps.csv")
    host = LocalHost(HostConfig(name="local", python=sys.executable, workdir=str(tmp_path)))
    s = asyncio.run(sample_host(host))
    assert s.host == "local" and s.gpus[0].memory_used_mib == 10861 and s.locks == ()


def test_a_stream_whose_uploaded_sampler_vanished_puts_it_back(tmp_path: Path, fake_smi: Callable[..., None]) -> None:
    """The workdir was wiped between two live views: the second stream's sampler cannot be opened,
    so it is uploaded again and started once more, and the samples come."""
    fake_smi("held-gpus.csv", "held-apps.csv")
    host = LocalHost(HostConfig(name="local", python=sys.executable, workdir=str(tmp_path)))

    async def two_views() -> tuple[HostGpus, HostGpus]:
        async with GpuStream(host, interval=0.2) as first:
            a = await first.next()
        for uploaded in (tmp_path / ".servelab" / me().user / "helpers").glob("gpusample-*"):
            uploaded.unlink()
        async with GpuStream(host, interval=0.2) as second:
            return a, await second.next()

    a, b = asyncio.run(two_views())
    assert a.gpus[0].memory_used_mib == b.gpus[0].memory_used_mib == 10861
    assert list((tmp_path / ".servelab" / me().user / "helpers").glob("gpusample-*"))

@settings(max_examples=40, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5), lambda c: st.lists(c, max_size=3) | st.dictionaries(st.sampled_from(["gpu", "gpus", "apps", "index", "uuid", "locks", "t"]), c, max_size=4), max_leaves=8))
def test_garbage_is_one_clean_line(data: object) -> None:
    try:
        from_json("h", data)
    except GpuSampleError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("h: ")


def test_not_json_is_one_line() -> None:
    with pytest.raises(GpuSampleError, match=r"^h200: the GPU sampler printed something else than JSON: 'Traceback"):
        parse_line("h200", "Traceback (most recent call last):")
    with pytest.raises(GpuSampleError, match="printed nothing"):
        parse_output("h200", b"\n")


def _at(name_gpus: str, name_apps: str, t: float, pids: dict[int, int] | None = None) -> HostGpus:
    (s,) = sampler(fake_smi_env(name_gpus, name_apps, pids))
    return HostGpus(host=s.host, gpu=True, t=t, gpus=s.gpus, processes=s.processes)


def test_track_release_and_figures(procs: tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]) -> None:
    mine, _ = procs
    run = RunProcesses(ids=frozenset({"r-gpu-1"}))
    idle = _at("idle-gpus.csv", "idle-apps.csv", 100.0)
    held = _at("held-gpus.csv", "held-apps.csv", 112.5, {RECORDED_PID: mine.pid})
    track = GpuTrack(run=run, started=100.0)
    for s in (idle, held):
        track.feed(s)
    assert track.baseline is idle and track.figures.peak_mib == {0: 10852} and track.figures.first_alloc_s == 12.5  # the run's own 10852 MiB, as its record keeps it (the GPU shows 10861)
    assert GpuFigures.from_json(json.loads(json.dumps(track.figures.to_json()))) == track.figures
    back = release(idle, [held, _at("idle-gpus.csv", "idle-apps.csv", 120.4)], run, stopped_at=120.0)
    assert back.returned and back.seconds == pytest.approx(0.4) and "back to their pre-launch memory" in back.message
    stuck = release(idle, [_at("held-gpus.csv", "held-apps.csv", 121.0, {RECORDED_PID: mine.pid})], run, stopped_at=120.0, within_s=5)
    assert not stuck.returned and stuck.still[0].holder is Holder.THIS_RUN and "s ends it" in stuck.message
    foreign = release(idle, [held, _at("held-gpus.csv", "held-apps.csv", 121.0)], run, stopped_at=120.0, within_s=5)
    assert not foreign.returned and foreign.still[0].holder is Holder.FOREIGN and "leaves it alone" in foreign.message
    assert stuck.mine_still and not foreign.mine_still  # what lets s end an ended run's leftovers
    both = release(idle, [_at("two-gpus.csv", "two-apps.csv", 121.0, {RECORDED_PID: mine.pid})], run, stopped_at=120.0, within_s=5)
    assert [h.holder for h in both.still] == [Holder.THIS_RUN, Holder.FOREIGN]
    assert "(this run)" in both.message and "(foreign)" in both.message and "s ends it; the others are not this run's" in both.message


@given(st.lists(st.tuples(st.floats(1, 60), st.integers(0, 3), st.integers(-100, 100)), min_size=2, max_size=40))
def test_flat_memory_hint_only_when_shards_advance_and_memory_is_flat(steps: list[tuple[float, int, int]]) -> None:
    watch, t, shards, mem = LoadWatch(flat_s=120, flat_mib=256), 0.0, 0, 5000
    for dt_s, ds, dm in steps:
        t, shards, mem = t + dt_s, shards + ds, mem + dm
        watch.feed(t, shards, mem)
    window = watch.points
    hint = watch.hint()
    flat = max(m for *_, m in window) - min(m for *_, m in window) < 256
    advanced = window[-1][1] > window[0][1]
    long_enough = window[-1][0] - window[0][0] >= 120
    assert (hint is not None) == (flat and advanced and long_enough)
