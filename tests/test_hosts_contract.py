"""The Host contract, checked the same way on the local host and on the real SSH server."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from servelab.engines.hosts.base import Host
from servelab.engines.hosts.local import LocalHost
from servelab.engines.hosts.ssh import SshHost
from servelab.engines.hosts.hostsfile import HostConfig
from tests.fixtures.sshd import SshServer

NASTY = ["$(touch PWNED)", "`touch PWNED`", "a; touch PWNED", "it's \"quoted\"", "two\nlines", "", "*", "-n", "~", "$HOME"]


@pytest.fixture(params=["local", "ssh"])
async def host(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Host]:
    if request.param == "local":
        h: Host = LocalHost(HostConfig(name="local", python=sys.executable, workdir=str(tmp_path)))
    else:
        request.getfixturevalue("ssh_config")
        server: SshServer = request.getfixturevalue("sshd")
        h = SshHost(HostConfig(name="t", ssh=server.alias, python=sys.executable, workdir=str(tmp_path)))
    yield h
    await h.close()


async def test_argv_elements_arrive_literally(host: Host, tmp_path: Path) -> None:
    done = await host.run([sys.executable, "-c", "import json,sys; print(json.dumps(sys.argv[1:]))", *NASTY], cwd=str(tmp_path))
    assert done.ok, done.stderr
    import json

    assert json.loads(done.text()) == NASTY
    assert not (tmp_path / "PWNED").exists()
    assert list(tmp_path.iterdir()) == []


async def test_env_cwd_input_and_exit_code(host: Host, tmp_path: Path) -> None:
    code = "import os,sys; d=sys.stdin.read(); print(os.environ['SL_X'], os.getcwd(), d); sys.exit(3)"
    done = await host.run([sys.executable, "-c", code], env={"SL_X": "a b;$(x)"}, cwd=str(tmp_path), input=b"fed")
    assert done.exit_code == 3 and not done.ok
    assert done.text().split() == ["a", "b;$(x)", str(tmp_path), "fed"]


async def test_empty_input_is_an_empty_stdin_not_a_wait(host: Host) -> None:
    done = await host.run([sys.executable, "-c", "import sys; print(repr(sys.stdin.read()))"], input=b"", timeout=20)
    assert done.ok and done.text().strip() == "''"


async def test_missing_program_is_127(host: Host) -> None:
    done = await host.run(["/nonexistent/servelab-no-such-program"])
    assert done.exit_code == 127


async def test_timeout_raises(host: Host) -> None:
    with pytest.raises(TimeoutError):
        await host.run([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.5)


async def test_a_cancel_as_the_command_ends_is_a_cancel_never_a_process_error(tmp_path: Path) -> None:
    """A campaign's stop cancels a load whose local command may be ending that instant: the cancel
    must arrive as a cancel (the old kill of an ended process raised ProcessLookupError, which read
    as the load refused). Cancels land across the command's whole life, before, at and after its end."""
    host = LocalHost(HostConfig(name="local", python=sys.executable, workdir=str(tmp_path)))
    loop = asyncio.get_running_loop()
    start = loop.time()
    await host.run(["true"])
    life = loop.time() - start
    seen: dict[str, int] = {}
    for i in range(300):
        task = asyncio.ensure_future(host.run(["true"]))
        await asyncio.sleep(life * (0.4 + 0.9 * (i % 30) / 30))
        task.cancel()
        try:
            await task
            kind = "done"
        except asyncio.CancelledError:
            kind = "cancelled"
        except Exception as exc:  # noqa: BLE001 - the failure this test looks for
            kind = type(exc).__name__
        seen[kind] = seen.get(kind, 0) + 1
    assert set(seen) <= {"done", "cancelled"}, seen


async def test_files(host: Host, tmp_path: Path) -> None:
    path = str(tmp_path / "a" / "b" / "f.bin")
    assert not await host.exists(path)
    with pytest.raises(FileNotFoundError):
        await host.read_bytes(path)
    await host.write_bytes(path, b"0123456789")
    assert await host.exists(path)
    assert await host.size(path) == 10
    assert await host.read_bytes(path) == b"0123456789"
    assert await host.read_bytes(path, 4) == b"456789"
    assert await host.read_bytes(path, 4, 3) == b"456"
    assert await host.read_bytes(path, 20) == b""
    await host.write_bytes(path, b"new")
    assert await host.read_bytes(path) == b"new"
    assert await host.listdir(str(tmp_path / "a" / "b")) == ["f.bin"]  # no temp file left behind
    assert await host.listdir(str(tmp_path / "nope")) == []


async def test_implements_the_host_protocol(host: Host) -> None:
    assert isinstance(host, Host)
    assert host.name == host.config.name


STREAMER = r"""
import os, signal, subprocess, sys, time
child = subprocess.Popen(["sleep", "600"])
def ended(*_):  # as gpusample.py does: SIGTERM ends what it started, then itself
    child.terminate()
    child.wait()
    sys.exit(0)
signal.signal(signal.SIGTERM, ended)
while True:
    print(os.getpid(), child.pid, os.environ.get("SL_X"), flush=True)
    time.sleep(0.05)
"""


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


async def test_stream_reads_lines_as_they_come_and_close_ends_the_command_and_its_children(host: Host) -> None:
    stream = await host.stream([sys.executable, "-c", STREAMER], env={"SL_X": "a;$(b)"})
    first, second = (await stream.readline()).split(), (await stream.readline()).split()
    assert first == second and first[2] == b"a;$(b)"
    pid, child = int(first[0]), int(first[1])
    await stream.close()
    for _ in range(100):
        if _gone(pid) and _gone(child):
            break
        await asyncio.sleep(0.05)
    assert _gone(pid) and _gone(child)
    await stream.close()  # idempotent


async def test_stream_of_a_missing_program_ends_at_once_with_127(host: Host) -> None:
    stream = await host.stream(["/nonexistent/servelab-no-such-program"])
    assert await stream.readline() == b""
    code, _err = await stream.finish()
    assert code == 127
    await stream.close()


#: A child that says on a FIFO (argv[1]) when it started and when SIGTERM reached it, then writes more
#: than a pipe and a paused reader hold (300 KB) and waits for a signal; argv[2] "stay" outlives SIGTERM
#: (and its pipe closed under it), "go" ends on it.
_TALKER = """
import os, signal, sys
said = open(sys.argv[1], "w", buffering=1)
def on_term(signum, frame):
    said.write("term\\n")
    if sys.argv[2] == "go":
        os._exit(0)
signal.signal(signal.SIGTERM, on_term)
said.write("started\\n")
try:
    sys.stdout.write(("x" * 99 + "\\n") * 3000)
    sys.stdout.flush()
except OSError:
    pass  # its reader closed the pipe: only a signal ends it
while True:
    signal.pause()
"""


@pytest.mark.parametrize("how", ["stream closed", "stream close cancelled", "run cancelled"])
def test_a_local_child_leaves_nothing_for_after_the_event_loop(how: str, tmp_path: Path) -> None:
    """A dashboard that quits while a sampler runs (output nobody read still in its pipe) or mid-command:
    the child's pipes are closed while the loop runs, so nothing prints "Event loop is closed" on the
    user's terminal when they are collected after it."""
    import gc

    host = LocalHost(HostConfig(name="local", python=sys.executable, workdir=str(tmp_path)))
    fifo = tmp_path / "said"
    os.mkfifo(fifo)
    talker = [sys.executable, "-c", _TALKER, str(fifo), "stay" if how == "stream close cancelled" else "go"]

    async def main() -> None:
        started = asyncio.ensure_future(host.run(talker)) if how == "run cancelled" else None
        stream = await host.stream(talker) if started is None else None
        said = await asyncio.wait_for(asyncio.to_thread(open, fifo), 30)  # the child opened it: it runs
        try:
            assert await asyncio.wait_for(asyncio.to_thread(said.readline), 30) == "started\n"
            if started is not None:
                started.cancel()  # mid-command: the child is writing more than the pipe holds
                with pytest.raises(asyncio.CancelledError):
                    await asyncio.wait_for(started, 60)  # (a cleanup waiting on a paused pipe never ends)
                return
            assert stream is not None and (await stream.readline()).startswith(b"x")
            if how == "stream closed":
                await stream.close()
                return
            closing = asyncio.ensure_future(stream.close())
            # SIGTERM reached the child, which stays: close() waits for it now
            assert await asyncio.wait_for(asyncio.to_thread(said.readline), 30) == "term\n"
            closing.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(closing, 60)
        finally:
            said.close()

    seen: list[str] = []
    hook, sys.unraisablehook = sys.unraisablehook, lambda u: seen.append(f"{u.exc_value!r} in {u.object!r}")
    try:
        asyncio.run(main())
        gc.collect()
    finally:
        sys.unraisablehook = hook
    assert seen == []
    assert not _child_started(talker)  # and the child is gone


def _child_started(argv: list[str]) -> bool:
    """A process of ``argv`` runs (its command line read from /proc)."""
    want = "\0".join(argv).encode()
    for p in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if p.read_bytes().rstrip(b"\0") == want:
                return True
        except OSError:
            continue
    return False
