"""The run lifecycle on the local host, with real detached processes (the StubEngine)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servelab.engines.errors import ServelabError
from servelab.engines.runs.records import RUN_ID_RE, RunRecord, new_run_id
from servelab.engines.runs.manager import Runs
from servelab.engines.runs.state import RunState
from servelab.engines.hosts.owner import me
from tests.fixtures.gpus import gpu_samples, replayed_h200
from tests.fixtures.runlab import STUB_PATH, Lab, group_members, is_running, proc_stat, wait_for


async def _collect(runs: Runs, run_id: str, offset: int = 0) -> bytes:
    out = b""
    async for new_offset, chunk in runs.follow(run_id, offset):
        out += chunk
        assert new_offset == offset + len(out)
    return out


def _stub_argv(data: bytes) -> list[str]:
    first = data.split(b"\n", 1)[0].decode()
    assert first.startswith("STUB argv "), first
    parsed: list[str] = json.loads(first[len("STUB argv ") :])
    return parsed


def test_run_id_format() -> None:
    rid = new_run_id("tiny-cpu-vllm-ngram")
    assert RUN_ID_RE.match(rid)
    assert re.fullmatch(r"tiny-cpu-vllm-ngram-\d{8}-\d{6}-[0-9a-f]{4}", rid)


async def test_launch_follow_and_exit_code(lab: Lab) -> None:
    lab.experiment("short", env={"STUB_LINES": "300", "STUB_INTERVAL": "0.002", "STUB_EXIT": "3"})
    runs = lab.runs()
    rec = await runs.launch("short", skip_preflight=True)
    assert rec.pid and rec.pgid == rec.pid and rec.start_time
    run_dir = Path(rec.run_dir)
    assert run_dir.parent == lab.workdir / "runs"
    assert (run_dir / "experiment.toml").read_text() == (lab.folder / "short.toml").read_text()
    saved = json.loads((run_dir / "run.json").read_text())
    assert saved["argv"] == rec.argv and saved["env"]["STUB_EXIT"] == "3" and saved["pid"] == rec.pid

    data = await _collect(runs, rec.id)
    lines = data.decode().splitlines()
    numbered = [line for line in lines if line.startswith("line ")]
    assert numbered == [f"line {i:08d}" for i in range(300)]
    assert lines[-1] == "STUB done"
    st = await runs.status(rec.id)
    assert (st.alive, st.exit_code, st.status) == (False, 3, "exited")
    assert (run_dir / "exit_code").read_text().strip() == "3"


async def test_engine_is_detached_and_liveness_is_noticed_quickly(lab: Lab) -> None:
    lab.experiment("forever")
    runs = lab.runs()
    rec = await runs.launch("forever", skip_preflight=True)
    assert rec.pid is not None
    st = proc_stat(rec.pid)
    assert st is not None
    _, pgid, sid, start = st
    assert (pgid, sid, start) == (rec.pid, rec.pid, rec.start_time)  # own session and group
    assert sid != os.getsid(0)
    assert os.readlink(f"/proc/{rec.pid}/fd/0") == "/dev/null"
    assert os.readlink(f"/proc/{rec.pid}/fd/1") == rec.log_path
    assert os.readlink(f"/proc/{rec.pid}/fd/2") == rec.log_path
    assert (await runs.status(rec.id)).alive

    os.kill(rec.pid, signal.SIGKILL)  # the engine dies on its own (OOM killer, crash...)
    t0 = time.monotonic()
    # how soon: bench/timed_bounds.py prints it (a timed bound here raced the machine's load)
    while (await runs.status(rec.id, analyze=False)).alive:
        assert time.monotonic() - t0 < 30, "the SIGKILLed engine is still reported alive"
    noticed = time.monotonic() - t0
    wait_for(lambda: (Path(rec.run_dir) / "exit_code").exists(), 2.0)
    st2 = await runs.status(rec.id)
    print(f"\nexit noticed {noticed * 1000:.0f} ms after SIGKILL; exit_code={st2.exit_code}")
    assert st2.exit_code == -signal.SIGKILL and not st2.alive


async def test_stop_takes_the_whole_group_and_spares_a_lookalike(lab: Lab) -> None:
    lab.experiment("workers", env={"STUB_CHILDREN": "3", "STUB_STUBBORN": "1"})
    runs = lab.runs()
    rec = await runs.launch("workers", skip_preflight=True)
    assert rec.pid is not None
    wait_for(lambda: len(group_members(rec.pid or 0)) == 4)  # the engine and its 3 workers
    members = group_members(rec.pid)
    wait_for(lambda: any(_ignores_sigterm(p) for p in members))  # the stubborn worker is ready
    # A decoy with the same command line, started outside servelab.
    decoy = subprocess.Popen(rec.argv, env={**os.environ, "PYTHONPATH": STUB_PATH}, stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: Path(f"/proc/{decoy.pid}/cmdline").read_bytes().split(b"\0")[:3] == [a.encode() for a in rec.argv[:3]])
        t0 = time.monotonic()
        st = await runs.stop(rec.id, grace=1.0)
        took = time.monotonic() - t0
        gone = [pid for pid in members if not is_running(pid)]
        print(f"\nstop: {len(gone)}/{len(members)} group processes gone in {took:.2f}s (one ignored SIGTERM), decoy alive: {is_running(decoy.pid)}")
        assert gone == members
        assert group_members(rec.pid) == []
        assert is_running(decoy.pid)
        assert (st.status, st.alive, st.exit_code) == ("stopped", False, 143)
        assert took >= 1.0  # the stubborn worker needed SIGKILL after the grace period
    finally:
        decoy.kill()
        decoy.wait()


def _ignores_sigterm(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


async def test_never_signals_a_process_it_did_not_start(lab: Lab) -> None:
    """A run record pointing at someone else's process (pid reuse, or a forged record) signals nothing."""
    lab.experiment("guard", env={"STUB_LINES": "1"})
    runs = lab.runs()
    rec = await runs.launch("guard", skip_preflight=True)
    await _collect(runs, rec.id)
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        st = proc_stat(stranger.pid)
        assert st is not None
        path = Path(rec.run_dir) / "run.json"
        saved = json.loads(path.read_text())
        (Path(rec.run_dir) / "exit_code").unlink()
        for start in (st[3] + 1, st[3]):  # a reused pid (other start time), then even a matching start time
            saved.update(pid=stranger.pid, pgid=stranger.pid, start_time=start)
            path.write_text(json.dumps(saved))
            status = await runs.status(rec.id)
            assert status.alive is (start == st[3])
            await runs.stop(rec.id, grace=0.2)
            assert is_running(stranger.pid)
    finally:
        stranger.kill()
        stranger.wait()


async def test_port_in_use_is_refused_with_its_holder(lab: Lab) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import socket,sys,time; s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(60)", "port-holder"],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None
        port = int(holder.stdout.readline())
        lab.experiment("clash", port=port)
        with pytest.raises(ServelabError) as info:
            await lab.runs().launch("clash", skip_preflight=True)
        message = str(info.value)
        print(f"\nrefused: {message}")
        assert f"port {port} is in use by pid {holder.pid}" in message and "port-holder" in message
        assert "\n" not in message
        assert [p.name for p in (lab.workdir / "runs").iterdir()] == [".launch.lock"]  # no run left behind
    finally:
        holder.kill()
        holder.wait()


async def test_second_launch_onto_a_running_runs_port_is_refused(lab: Lab) -> None:
    port = lab.experiment("first")
    lab.experiment("second", port=port)
    runs = lab.runs()
    rec = await runs.launch("first", skip_preflight=True)
    try:
        with pytest.raises(ServelabError, match=f"port {port} belongs to servelab run {rec.id}"):
            await lab.runs().launch("second", skip_preflight=True)  # another dashboard, same host
    finally:
        await runs.stop(rec.id, grace=2)


NASTY = {
    "subst": "$(touch {d}/PWNED-subst)",
    "ticks": "`touch {d}/PWNED-ticks`",
    "semi": "x; touch {d}/PWNED-semi",
    "quotes": "it's \"{d}\" '$HOME'",
    "newline": "a\ntouch {d}/PWNED-newline\n",
}


async def test_injection_values_arrive_literally_and_create_nothing(lab: Lab, tmp_path: Path) -> None:
    trap = tmp_path / "trap"
    trap.mkdir()
    values = {k: v.format(d=trap) for k, v in NASTY.items()}
    lab.experiment("inject", env={"STUB_LINES": "1", "SL_NASTY": values["subst"] + values["newline"]}, engine_args=values, served_model_name=values["semi"])
    runs = lab.runs()
    rec = await runs.launch("inject", skip_preflight=True)
    argv = _stub_argv(await _collect(runs, rec.id))
    assert argv[argv.index("--served-model-name") + 1] == values["semi"]
    for key, value in values.items():
        assert argv[argv.index(f"--{key}") + 1] == value
    assert list(trap.iterdir()) == []
    assert not list(Path(rec.run_dir).glob("PWNED*")) and not list(Path.cwd().glob("PWNED*"))


async def test_artifacts(lab: Lab) -> None:
    lab.experiment("art", env={"STUB_LINES": "1"})
    runs = lab.runs()
    rec = await runs.launch("art", skip_preflight=True)
    await runs.write_artifact(rec.id, "probe.json", b'{"ok": true}')
    assert await runs.read_artifact(rec.id, "probe.json") == b'{"ok": true}'
    assert await runs.read_artifact(rec.id, "probe-requests.jsonl") is None
    for bad in ("run.json", "../x", "a/b", ".hidden", "exit_code"):
        with pytest.raises(ServelabError):
            await runs.write_artifact(rec.id, bad, b"x")
    assert (await runs.base_url(rec.id)) == f"http://127.0.0.1:{rec.port}"
    # a located run reads and writes its own folder, by the same rules, without asking a host where it is
    at = await runs.locate(rec.id)
    await at.write("probe-requests.jsonl", b"{}\n")
    assert await runs.read_artifact(rec.id, "probe-requests.jsonl") == b"{}\n" == await at.read("probe-requests.jsonl")
    assert await at.read("run.json") is not None and await at.read("diagnosis.json") is None  # the lifecycle's files are readable
    for bad in ("run.json", "../x", "a/b", ".hidden", "engine.log"):
        with pytest.raises(ServelabError):
            await at.write(bad, b"x")
    with pytest.raises(ServelabError):
        await at.read("../run.json")


async def test_list_find_and_unknown_runs(lab: Lab) -> None:
    lab.experiment("one", env={"STUB_LINES": "1"})
    runs = lab.runs()
    a = await runs.launch("one", skip_preflight=True)
    await _collect(runs, a.id)  # the same port: the second waits for the first to end
    b = await runs.launch("one", skip_preflight=True)
    listed = await runs.list()
    assert [r.id for r in listed] == sorted([a.id, b.id], key=lambda i: [r.id for r in listed].index(i))
    assert {r.id for r in listed} == {a.id, b.id}
    assert all(isinstance(r, RunRecord) for r in listed)
    host, found = await runs.find(a.id)
    assert host.name == "local" and found.id == a.id
    with pytest.raises(ServelabError, match="no run one-20000101-000000-abcd"):
        await runs.find("one-20000101-000000-abcd")
    with pytest.raises(ServelabError, match="not a run id"):
        await runs.find("../../etc")


async def test_two_host_names_for_one_folder_list_each_run_once(lab: Lab) -> None:
    """``local`` and ``local-sglang`` (one machine, one workdir) are one place: each run is listed,
    cleaned up and watched once, whichever name launched it; a second workdir is another place."""
    other = lab.workdir.parent / "other-work"
    with (lab.folder / "hosts.toml").open("a") as f:
        f.write(f'\n[hosts.twin]\npython = "{sys.executable}"\nworkdir = "{lab.workdir}"\n')
        f.write(f'\n[hosts.other]\npython = "{sys.executable}"\nworkdir = "{other}"\n')
    lab.experiment("one", env={"STUB_LINES": "1"})
    lab.experiment("two", host="twin", env={"STUB_LINES": "1"})
    lab.experiment("three", host="other", env={"STUB_LINES": "1"})
    runs = lab.runs()
    recs = [await runs.launch(name, skip_preflight=True) for name in ("one", "two", "three")]
    assert sorted(runs.host_names()) == ["local", "other"]  # twin shares local's folder
    listed = await runs.list()
    assert sorted(r.id for r in listed) == sorted(r.id for r in recs)  # each once, not once per name
    assert {r.id: r.host for r in listed} == {recs[0].id: "local", recs[1].id: "twin", recs[2].id: "other"}
    known = await runs.list_known()
    assert len(known) == 3 and not any(k.stale for k in known)


async def test_list_reports_an_unreachable_host(lab: Lab) -> None:
    lab.add_gone_host()
    lab.experiment("here", env={"STUB_LINES": "1"})
    runs = lab.runs()
    rec = await runs.launch("here", skip_preflight=True)
    listed = await runs.list()
    assert [r.id for r in listed] == [rec.id]
    assert set(runs.unreachable) == {"gone"} and "cannot connect" in runs.unreachable["gone"]


async def test_cleanup_removes_only_leftovers_of_ended_runs(lab: Lab) -> None:
    # Lives about 3 s, so the supervisor sees what it holds in /dev/shm.
    lab.experiment("leaky", env={"STUB_LINES": "3", "STUB_INTERVAL": "1", "STUB_CHILDREN": "2", "STUB_SHM": "1"})
    lab.experiment("alive", env={"STUB_CHILDREN": "1", "STUB_SHM": "1"})
    unrelated = Path(f"/dev/shm/servelab-test-unrelated-{os.getpid()}")
    # Another user's engine, named like ours and made while the run lives, held by nobody right now.
    other_engine = Path(f"/dev/shm/psm_servelab-test-other-user-{os.getpid()}")
    runs = lab.runs()
    leaky = await runs.launch("leaky", skip_preflight=True)
    live = None
    try:
        unrelated.write_bytes(b"x")  # another program's file, made while the run lives
        other_engine.write_bytes(b"x")
        log = await _collect(runs, leaky.id)
        live = await runs.launch("alive", skip_preflight=True)
        wait_for(lambda: b"STUB shm" in Path(live.log_path).read_bytes())
        orphans = json.loads(re.search(rb"STUB children (\[.*\])", log).group(1))  # type: ignore[union-attr]
        shm = re.search(rb"STUB shm (\S+)", log).group(1).decode()  # type: ignore[union-attr]
        assert all(is_running(p) for p in orphans) and Path(shm).exists()

        planned = await runs.cleanup(dry_run=True)
        print("\ncleanup plan:\n  " + "\n  ".join(planned))
        assert len(planned) == 3
        assert all(leaky.id in item for item in planned)
        assert all(is_running(p) for p in orphans) and Path(shm).exists()  # a dry run touches nothing

        await runs.cleanup(dry_run=False)
        wait_for(lambda: not any(is_running(p) for p in orphans), 3)
        assert not Path(shm).exists()
        assert unrelated.exists() and other_engine.exists()
        assert (await runs.status(live.id, analyze=False)).alive
        assert await runs.cleanup(dry_run=True) == []
    finally:
        unrelated.unlink(missing_ok=True)
        other_engine.unlink(missing_ok=True)
        if live is not None:
            await runs.stop(live.id, grace=1)
        for p in Path("/dev/shm").glob("psm_servelabstub*"):
            if not is_running(int(p.name[len("psm_servelabstub") :])):
                p.unlink()


async def test_stop_removes_the_runs_own_shared_memory_and_only_its_own(lab: Lab) -> None:
    """#22: a stopped run's /dev/shm files go with the stop (SGLang's stayed behind, and `servelab
    cleanup` then offered them together with another run's); another live run's stay."""
    lab.experiment("first", env={"STUB_SHM": "1", "STUB_INTERVAL": "0.2"})
    lab.experiment("second", env={"STUB_SHM": "1", "STUB_INTERVAL": "0.2"})
    runs = lab.runs()
    first = await runs.launch("first", skip_preflight=True)
    second = await runs.launch("second", skip_preflight=True)
    try:
        for rec in (first, second):  # the supervisor saw each file held
            wait_for(lambda rec=rec: (Path(rec.run_dir) / "shm-owned.json").exists(), 10)
        mine, theirs = (re.search(rb"STUB shm (\S+)", Path(r.log_path).read_bytes()).group(1).decode() for r in (first, second))  # type: ignore[union-attr]
        assert Path(mine).exists() and Path(theirs).exists()
        st = await runs.stop(first.id, grace=5)
        assert st.status is RunState.STOPPED and st.record.stop_signal == "SIGTERM"
        assert st.cleaned == [mine]
        assert not Path(mine).exists() and Path(theirs).exists()
        assert await runs.cleanup(dry_run=True) == []  # nothing of the stopped run left to offer
        assert (await runs.status(second.id, analyze=False)).alive
    finally:
        await runs.stop(second.id, grace=1)
    assert not Path(theirs).exists()


async def test_a_runs_shared_memory_names_are_its_engines_own_as_its_adapter_gives_them(lab: Lab) -> None:
    """The host-side cleanup knows no engine: the run's record carries its adapter's /dev/shm
    prefixes. The stub (a vLLM run) holds one file under vLLM's prefix and one under SGLang's:
    its stop removes the first and leaves the second, which no vLLM process makes."""
    from servelab.engines.adapters.base import get_adapter

    vllm, sglang = get_adapter("vllm").shm_prefixes[0], get_adapter("sglang").shm_prefixes[0]
    lab.experiment("named", env={"STUB_SHM": "1", "STUB_SHM_PREFIXES": f"{vllm},{sglang}", "STUB_INTERVAL": "0.2"})
    runs = lab.runs()
    rec = await runs.launch("named", skip_preflight=True)
    held: list[str] = []
    try:
        assert rec.shm_prefixes == list(get_adapter("vllm").shm_prefixes)
        wait_for(lambda: len(re.findall(rb"STUB shm (\S+)", Path(rec.log_path).read_bytes())) == 2, 10)
        held = [m.decode() for m in re.findall(rb"STUB shm (\S+)", Path(rec.log_path).read_bytes())]
        wait_for(lambda: (Path(rec.run_dir) / "shm-owned.json").exists(), 10)
        st = await runs.stop(rec.id, grace=5)
        assert st.cleaned == [held[0]]
        assert not Path(held[0]).exists() and Path(held[1]).exists()
    finally:
        for path in held:
            Path(path).unlink(missing_ok=True)


async def test_launch_refuses_a_broken_definition_and_a_missing_python(lab: Lab) -> None:
    (lab.folder / "broken.toml").write_text('engine = "vllm"\nmodel = "m"\ntensr = 8\n')
    with pytest.raises(ServelabError, match="broken"):
        await lab.runs().launch("broken")
    lab.experiment("nopy", host="elsewhere")
    with (lab.folder / "hosts.toml").open("a") as f:
        f.write(f'\n[hosts.elsewhere]\npython = "/nonexistent/python3"\nworkdir = {json.dumps(str(lab.workdir))}\n')
    with pytest.raises(ServelabError, match="cannot run the host's python"):
        await lab.runs().launch("nopy", skip_preflight=True)


async def test_launch_runs_preflight_first_and_starts_nothing_when_it_fails(lab: Lab) -> None:
    lab.experiment("unchecked")  # no model folder, and this interpreter has no vllm
    t0 = time.monotonic()
    with pytest.raises(ServelabError) as info:
        await lab.runs().launch("unchecked")
    took = time.monotonic() - t0
    print(f"\npreflight refused the launch in {took:.1f}s: {info.value}")
    assert "preflight of unchecked on local" in str(info.value) and "\n" not in str(info.value)
    assert not (lab.workdir / "runs").exists()  # no run folder, no process


FAKE_SMI = Path(__file__).resolve().parent / "fake_nvidia_smi"


async def test_busy_gpus_are_refused_with_their_holder(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "gpu-holder"])
    try:
        monkeypatch.setenv("PATH", f"{FAKE_SMI}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("FAKE_GPUS", "2")
        monkeypatch.setenv("FAKE_GPU_APPS", f"{holder.pid}:1")
        lab.experiment("on1", env={"CUDA_VISIBLE_DEVICES": "1"})
        lab.experiment("on0", env={"CUDA_VISIBLE_DEVICES": "0"})
        lab.experiment("also0", env={"CUDA_VISIBLE_DEVICES": "0"})
        runs = lab.runs()
        with pytest.raises(ServelabError) as info:
            await runs.launch("on1", skip_preflight=True)
        print(f"\nrefused: {info.value}")
        assert f"GPU 1 is busy with pid {holder.pid}" in str(info.value) and "gpu-holder" in str(info.value)
        rec = await runs.launch("on0", skip_preflight=True)
        try:
            with pytest.raises(ServelabError, match=f"GPUs overlap with servelab run {rec.id}"):
                await lab.runs().launch("also0", skip_preflight=True)  # a second dashboard, same GPU
        finally:
            await runs.stop(rec.id, grace=1)
    finally:
        holder.kill()
        holder.wait()


async def test_the_supervisor_records_the_runs_own_peak_gpu_memory(lab: Lab, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Replayed H200 answers (FakeNvidiaSmi): recorded pid 794 is the run's engine, 1148 a foreign process
    on the same GPU. The record keeps the run's own peak (not the GPU's used memory, not the foreign
    process's), keeps it when the memory falls, and the time to the first allocation."""
    data, apps, pids = replayed_h200(monkeypatch, tmp_path, "0.5")  # the launch finds the GPU free
    foreign = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lab.experiment("held")
        runs = lab.runs()
        rec = await runs.launch("held", skip_preflight=True)
        run_json = Path(rec.run_dir) / "run.json"
        try:
            pids.write_text(f"794:{rec.pid},1148:{foreign.pid}")
            apps.write_text((data / "two-apps.csv").read_text())
            wait_for(lambda: json.loads(run_json.read_text()).get("gpu_peak_mib") == {"0": 10852}, timeout=15)
            first = json.loads(run_json.read_text())["gpu_first_alloc_s"]
            assert isinstance(first, float) and 0 <= first < 15
            apps.write_text("# nvidia-smi --query-compute-apps=pid,process_name,gpu_uuid,used_memory --format=csv,noheader,nounits\n"
                            "794, /opt/torch/.venv/bin/python3, GPU-95e27d26-9e81-34c3-d01e-3f722d7dd4cf, 2048\n")
            # several samples at the lower figure: the calls begun after the swap (a call reads the
            # file after it is logged), and the one after them begun, so theirs were taken in full
            n = len(gpu_samples(tmp_path))
            wait_for(lambda: len(gpu_samples(tmp_path)) >= n + 3, timeout=30)
            status = await runs.status(rec.id)
            assert status.record.gpu_peak_mib == {"0": 10852} and status.record.gpu_first_alloc_s == first
        finally:
            await runs.stop(rec.id, grace=1)
    finally:
        foreign.kill()
        foreign.wait()


async def test_a_cpu_host_records_no_gpu_memory(lab: Lab) -> None:
    lab.experiment("cpu", env={"STUB_LINES": "1"})
    runs = lab.runs()
    rec = await runs.launch("cpu", skip_preflight=True)
    await _collect(runs, rec.id)
    status = await runs.status(rec.id)
    assert status.record.gpu_peak_mib == {} and status.record.gpu_first_alloc_s is None


async def test_follow_notices_truncation(lab: Lab) -> None:
    lab.experiment("rotated", env={"STUB_LINES": "400", "STUB_INTERVAL": "0.005"})
    runs = lab.runs()
    rec = await runs.launch("rotated", skip_preflight=True)
    before = b""
    after = b""
    truncated_at = None
    async for offset, chunk in runs.follow(rec.id):
        if truncated_at is None and len(before) > 2000:
            truncated_at = len(before)
            os.truncate(rec.log_path, 0)  # someone rotates the log under us
            continue
        if truncated_at is not None and offset == 0 and chunk == b"":
            after = b"<truncated>"
            continue
        if after:
            after += chunk
        else:
            before += chunk
    assert truncated_at is not None and after.startswith(b"<truncated>")
    tail = after[len(b"<truncated>") :]
    assert tail.endswith(b"STUB done\n") and len(tail) < 400 * 14
    assert tail == Path(rec.log_path).read_bytes()  # after the notice, exactly what the file now holds


async def test_the_run_control_helper_is_uploaded_again_when_removed(lab: Lab) -> None:
    lab.experiment("again", env={"STUB_LINES": "1"})
    runs = lab.runs()
    first = await runs.launch("again", skip_preflight=True)
    await _collect(runs, first.id)
    helpers = list((lab.workdir / ".servelab" / me().user / "helpers").glob("runctl-*/runctl.py"))  # runctl.py travels in a bundle with hostlib.py
    assert len(helpers) == 1
    helpers[0].unlink()  # someone cleans the workdir by hand
    assert [r.id for r in await runs.list("local")] == [first.id]
    assert helpers[0].exists()


def test_home_relative_workdir_over_ssh() -> None:
    from servelab.engines.hosts.hostsfile import HostConfig
    from servelab.engines.runs.records import runs_root

    assert runs_root(HostConfig(name="g", ssh="gpu", workdir="~/servelab")) == "servelab/runs"
    assert runs_root(HostConfig(name="g", ssh="gpu", workdir="/data/servelab/")) == "/data/servelab/runs"


async def test_status_analysis_reads_only_new_bytes_and_restarts_on_truncation(lab: Lab) -> None:
    """A dashboard polls status every second: each poll must see the lines added since, no more, no less."""
    lab.experiment("growing", env={"STUB_LINES": "400", "STUB_INTERVAL": "0.01", "STUB_EXIT": "0"})
    runs = lab.runs()
    rec = await runs.launch("growing", skip_preflight=True)
    log = Path(rec.log_path)
    seen: list[int] = []
    while True:
        st = await runs.status(rec.id)
        assert st.analysis is not None
        seen.append(st.analysis.lines)
        if not st.alive:
            break
        time.sleep(0.3)
    assert len(seen) >= 3 and seen == sorted(seen) and seen[0] < seen[-1]
    total = log.read_bytes().count(b"\n")
    assert seen[-1] == total
    again = await runs.status(rec.id)
    assert again.analysis == st.analysis  # an ended run's analysis is stable
    log.write_bytes(b"line a\nline b\n")  # replaced by something shorter: analysed from the start
    shrunk = await runs.status(rec.id)
    assert shrunk.analysis is not None and shrunk.analysis.lines == 2


async def test_an_engine_gone_before_its_supervisor_wrote_the_exit_code_reads_running_then_lost(lab: Lab) -> None:
    """The instant between an engine's death and its supervisor's exit code (every stop has one):
    held open with SIGSTOP on the supervisor, the dead engine a zombie it has not reaped. The run is
    still "running" (about to end), never a transient "lost", in Runs.status and in runctl's
    listing alike; once the supervisor is gone too, nobody will write the code: "lost"."""
    lab.experiment("ending", env={"STUB_INTERVAL": "0.2"})
    runs = lab.runs()
    rec = await runs.launch("ending", skip_preflight=True)
    sup = rec.supervisor_pid
    assert sup and rec.pid and sup != rec.pid
    try:
        os.kill(sup, signal.SIGSTOP)
        os.kill(rec.pid, signal.SIGKILL)
        wait_for(lambda: (proc_stat(rec.pid) or ("Z",))[0] in ("Z", "X"), timeout=10)  # dead, not reaped
        st = await runs.status(rec.id, analyze=False)
        assert (st.alive, st.exit_code, st.record.status) == (False, None, RunState.RUNNING)
        assert [r.status for r in await runs.list("local") if r.id == rec.id] == [RunState.RUNNING]
    finally:
        os.kill(sup, signal.SIGKILL)
    wait_for(lambda: not is_running(sup), timeout=10)
    st = await runs.status(rec.id, analyze=False)
    assert (st.alive, st.exit_code, st.record.status) == (False, None, RunState.LOST)
    assert [r.status for r in await runs.list("local") if r.id == rec.id] == [RunState.LOST]


async def test_a_stop_between_two_gpu_samples_records_the_peak_it_reached(lab: Lab, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The supervisor samples every SERVELAB_GPU_SAMPLE_S (60 s here): a run that allocates and is stopped
    before its next sample still records its peak and first allocation, from the stop's own last sample
    (on the H200 a run stopped 0.1 s after its last step kept 4708 MiB of 8804)."""
    _data, apps, pids = replayed_h200(monkeypatch, tmp_path, "60")
    lab.experiment("short")
    runs = lab.runs()
    rec = await runs.launch("short", skip_preflight=True)
    run_json = Path(rec.run_dir) / "run.json"
    wait_for(lambda: "started_epoch" in json.loads(run_json.read_text()), timeout=15)
    # the supervisor's first sample (idle GPU) is behind it, its nvidia-smi gone; its next is 60 s away
    wait_for(lambda: len(gpu_samples(tmp_path)) >= 1 and not is_running(gpu_samples(tmp_path)[0]), timeout=15)
    pids.write_text(f"794:{rec.pid}")
    allocated_after = time.time() - json.loads(run_json.read_text())["started_epoch"]  # the GPU shows the run's memory from here
    apps.write_text("# nvidia-smi --query-compute-apps=pid,process_name,gpu_uuid,used_memory --format=csv,noheader,nounits\n"
                    "794, /opt/torch/.venv/bin/python3, GPU-95e27d26-9e81-34c3-d01e-3f722d7dd4cf, 8804\n")
    await runs.stop(rec.id, grace=1)
    status = await runs.status(rec.id)
    assert status.record.gpu_peak_mib == {"0": 8804}
    # seen by the stop's own sample: after the allocation appeared, long before the next periodic one
    assert status.record.gpu_first_alloc_s is not None and allocated_after - 0.1 <= status.record.gpu_first_alloc_s < 60, (allocated_after, status.record.gpu_first_alloc_s)


async def test_run_json_records_the_target_by_its_weights(lab: Lab) -> None:
    """The target as served, by fingerprint: the folder's weights at launch, a replaced folder another
    fingerprint at the same path, and no fingerprint (never a failed launch) for what is no checkpoint."""
    from servelab.engines.helpers.weightprint import fingerprint
    from tests.fixtures.targets import make

    lab.experiment("fp", env={"STUB_LINES": "5", "STUB_EXIT": "0"})
    runs = lab.runs()
    def ended(rec: RunRecord) -> None:  # the next launch takes the same port: the last run has let it go
        wait_for(lambda: (Path(rec.run_dir) / "exit_code").exists(), 30)

    absent = await runs.launch("fp", skip_preflight=True)
    assert absent.target == {} and absent.target_identity is None
    ended(absent)
    model = make(lab.folder / "no-model", seed=1)
    first = await runs.launch("fp", skip_preflight=True)
    ended(first)
    saved = json.loads((Path(first.run_dir) / "run.json").read_text())
    assert saved["target"]["fingerprint"] == fingerprint(str(model))["fingerprint"] == first.target["fingerprint"]
    other = make(lab.folder / "other", seed=2)
    for p in other.iterdir():
        os.replace(p, model / p.name)
    second = await runs.launch("fp", skip_preflight=True)
    assert second.target_identity is not None and first.target_identity is not None
    assert second.target_identity.differs(first.target_identity) == ["weights"]
    for rec in (absent, first, second):
        wait_for(lambda rec=rec: (Path(rec.run_dir) / "exit_code").exists(), 30)
