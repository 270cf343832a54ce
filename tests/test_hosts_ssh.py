"""The SSH host against a real OpenSSH server: host keys, ProxyJump, reuse, reconnect, forwarding."""

from __future__ import annotations

import asyncio
import http.server
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from servelab.engines.hosts.base import HostUnreachable
from servelab.engines.hosts.registry import close_all, open_host
from servelab.engines.hosts.ssh import SshHost, split_target
from servelab.engines.hosts.hostsfile import HostConfig
from tests.fixtures.ports import free_port
from tests.fixtures.sshd import JUMP_ALIAS, SshServer

pytestmark = pytest.mark.ssh


def _host(target: str, **kw: object) -> SshHost:
    return SshHost(HostConfig(name="t", ssh=target, python=sys.executable, workdir="/tmp", connect_timeout=5.0), **kw)  # type: ignore[arg-type]


def test_split_target() -> None:
    assert split_target("root@blackwell") == ("blackwell", "root", None)
    assert split_target("alias") == ("alias", None, None)
    assert split_target("u@10.0.0.1:2222") == ("10.0.0.1", "u", 2222)
    assert split_target("[::1]:2200") == ("::1", None, 2200)


async def test_unknown_host_key_is_refused(ssh_config: SshServer, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    cfg = ssh_config.write_config(tmp_path / "config", known_hosts=empty)
    host = _host(ssh_config.alias, ssh_config=[str(cfg)])
    t0 = time.monotonic()
    with pytest.raises(HostUnreachable) as info:
        await host.run(["true"])
    message = str(info.value)
    print(f"\nunknown host key refused in {time.monotonic() - t0:.2f}s: {message}")
    assert "host key refused" in message and "known_hosts" in message
    assert "\n" not in message
    # the name known_hosts uses (with the port), the file in effect, and the two ways to fix it
    assert f"[127.0.0.1]:{ssh_config.port} is not in known_hosts ({empty})" in message
    assert f"ssh-keyscan -p {ssh_config.port} 127.0.0.1 >> {empty}" in message
    assert f"ssh -F {cfg} {ssh_config.alias}" in message
    # the advised command really fixes it
    scan = subprocess.run(["ssh-keyscan", "-p", str(ssh_config.port), "127.0.0.1"], capture_output=True, check=True, timeout=30)
    empty.write_bytes(scan.stdout)
    fixed = _host(ssh_config.alias, ssh_config=[str(cfg)])
    try:
        assert (await fixed.run(["echo", "in"])).text().strip() == "in"
    finally:
        await fixed.close()
    assert host.connects == 0  # refused: never connected, never retried into acceptance


async def test_changed_host_key_is_refused(ssh_config: SshServer, tmp_path: Path) -> None:
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    pub = " ".join((tmp_path / "other_key.pub").read_text().split()[:2])
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"[127.0.0.1]:{ssh_config.port} {pub}\n")
    host = _host(ssh_config.alias, ssh_config=[str(ssh_config.write_config(tmp_path / "config", known_hosts=wrong))])
    with pytest.raises(HostUnreachable, match="host key refused") as info:
        await host.exists("/")
    assert f"the key [127.0.0.1]:{ssh_config.port} offers does not match known_hosts ({wrong})" in str(info.value)
    assert f"ssh-keygen -R '[127.0.0.1]:{ssh_config.port}' -f {wrong}" in str(info.value)


async def test_unreachable_port_is_one_line(ssh_config: SshServer) -> None:
    port = free_port()
    host = _host(f"127.0.0.1:{port}", backoff=(0.0, 0.1, 0.2))
    with pytest.raises(HostUnreachable) as info:
        await host.exists("/")
    assert "cannot connect" in str(info.value) and "\n" not in str(info.value)


async def test_one_connection_is_reused_for_every_channel(ssh_config: SshServer) -> None:
    host = _host(ssh_config.alias)
    try:
        results = await asyncio.gather(*(host.run(["echo", str(i)]) for i in range(10)), host.exists("/"), host.listdir("/"))
        assert [r.text().strip() for r in results[:10]] == [str(i) for i in range(10)]
        assert host.connects == 1
        assert len(ssh_config.session_pids()) >= 1
    finally:
        await host.close()


async def test_proxyjump_from_ssh_config(ssh_config: SshServer) -> None:
    host = _host(JUMP_ALIAS)
    try:
        done = await host.run(["echo", "via-jump"])
        assert done.text().strip() == "via-jump"
    finally:
        await host.close()


async def test_reconnects_after_the_server_side_session_dies(ssh_config: SshServer, tmp_path: Path) -> None:
    host = _host(ssh_config.alias)
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    try:
        assert await host.read_bytes(str(path)) == b"abc"
        before = set(ssh_config.session_pids())
        for pid in before:
            os.kill(pid, signal.SIGKILL)
        t0 = time.monotonic()
        assert await host.read_bytes(str(path)) == b"abc"  # retried on a new connection
        print(f"\nreconnected after the session was killed in {time.monotonic() - t0:.2f}s")
        assert host.connects == 2
        assert (await host.run(["echo", "ok"])).text().strip() == "ok"
    finally:
        await host.close()


async def test_a_host_down_waits_out_one_backoff_then_each_call_tries_once_until_it_answers(downable_sshd: SshServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A link that worked gets the whole backoff when it drops (a blip rides it out); once that
    failed, every later call tries once (a dashboard lists a down host each second: each listing must
    not wait the backoff out again), until a connection succeeds, which re-arms the whole backoff."""
    host = _host(downable_sshd.alias, backoff=(0.0, 0.01, 0.01, 0.01))
    attempts: list[int] = []
    real_open = host._open

    async def counted() -> object:
        attempts.append(1)
        return await real_open()

    monkeypatch.setattr(host, "_open", counted)
    try:
        assert await host.exists("/")
        assert len(attempts) == 1
        for _ in range(2):  # down, back, down again: the whole backoff each time it drops after working
            downable_sshd.go_down()
            before = len(attempts)
            with pytest.raises(HostUnreachable):
                await host.listdir("/")
            assert len(attempts) - before == 4  # the whole backoff
            for _ in range(3):
                with pytest.raises(HostUnreachable):
                    await host.listdir("/")
            assert len(attempts) - before == 4 + 3  # then once per call
            downable_sshd.come_back()
            assert await host.exists("/")  # one attempt, and it answers
            assert len(attempts) - before == 4 + 3 + 1
    finally:
        await host.close()


async def test_a_command_cut_by_the_host_going_down_is_an_unreachable_host_not_an_exit_code(downable_sshd: SshServer, tmp_path: Path) -> None:
    """The server's session dies mid-command (the host went away): the channel closes with no exit
    status. That is the host, unreachable, never a command that 'exited 137' (a Slurm query read so
    made a fleet campaign fail a point instead of moving it off the dropped host)."""
    host = _host(downable_sshd.alias)
    started = tmp_path / "started"
    try:
        run = asyncio.ensure_future(host.run(["sh", "-c", 'touch "$1"; exec sleep 60', "sh", str(started)], timeout=90))
        while not started.exists():  # the command runs on the host: its session is the one cut
            assert not run.done(), run.result()
            await asyncio.sleep(0.05)
        downable_sshd.go_down()
        with pytest.raises(HostUnreachable, match="connection lost while running sh"):
            await run
    finally:
        await host.close()


@pytest.fixture
def http_server() -> Iterator[int]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = b"hello from the host"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()


async def test_forward_port_reaches_the_hosts_loopback(ssh_config: SshServer, http_server: int) -> None:
    host = _host(ssh_config.alias)
    try:
        local = await host.forward_port(http_server)
        assert local != http_server
        assert await host.forward_port(http_server) == local  # one listener per remote port
        async with httpx.AsyncClient() as client:
            r = await client.get(f"http://127.0.0.1:{local}/")
        assert r.text == "hello from the host"
    finally:
        await host.close()


async def test_open_host_caches_one_host_per_config(ssh_config: SshServer) -> None:
    cfg = HostConfig(name="t", ssh=ssh_config.alias, python=sys.executable, workdir="/tmp")
    a = open_host(cfg)
    assert open_host(cfg) is a
    assert isinstance(a, SshHost)
    assert open_host(HostConfig(name="local")) is not a
    await a.run(["true"])
    await close_all()
    assert open_host(cfg) is not a
    await close_all()


async def test_keys_from_the_ssh_agent(ssh_config: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        wait = time.monotonic() + 5
        while not sock.exists() and time.monotonic() < wait:
            await asyncio.sleep(0.02)
        subprocess.run(["ssh-add", "-q", str(ssh_config.client_key)], env={**os.environ, "SSH_AUTH_SOCK": str(sock)}, check=True, capture_output=True)
        cfg = tmp_path / "config"  # no IdentityFile: the only way in is the agent
        cfg.write_text(f"Host agent-box\n  HostName 127.0.0.1\n  Port {ssh_config.port}\n  User {ssh_config.user}\n  UserKnownHostsFile {ssh_config.known_hosts}\n")
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        host = _host("agent-box", ssh_config=[str(cfg)])
        try:
            assert (await host.run(["echo", "agent"])).text().strip() == "agent"
        finally:
            await host.close()
        monkeypatch.delenv("SSH_AUTH_SOCK")
        with pytest.raises(HostUnreachable, match="authentication refused"):
            await _host("agent-box", ssh_config=[str(cfg)]).run(["true"])
    finally:
        agent.terminate()
        agent.wait()


async def test_an_unknown_name_fails_at_once(ssh_config: SshServer) -> None:
    """No backoff for what retrying cannot fix: one attempt, whatever the backoff offers (how long
    the refusal takes: bench/timed_bounds.py)."""
    host = _host("no-such-host.invalid", backoff=(0.0, 0.0, 0.0, 0.0))
    attempts = []
    real_open = host._open

    async def counted_open():  # type: ignore[no-untyped-def]
        attempts.append(1)
        return await real_open()

    host._open = counted_open  # type: ignore[method-assign]
    with pytest.raises(HostUnreachable, match="cannot resolve no-such-host.invalid"):
        await host.run(["true"])
    assert len(attempts) == 1 and host.connects == 0


async def test_an_alias_whose_hostname_does_not_resolve_names_that_hostname(ssh_config: SshServer, tmp_path: Path) -> None:
    cfg = tmp_path / "config"
    cfg.write_text("Host badname\n  HostName no-such-host.invalid\n")
    with pytest.raises(HostUnreachable) as info:
        await _host("badname", ssh_config=[str(cfg)]).run(["true"])
    assert f"cannot resolve no-such-host.invalid (HostName of badname in {cfg})" in str(info.value)


async def test_a_direct_target_refused_for_want_of_a_key_names_the_alias_that_has_one(ssh_config: SshServer, tmp_path: Path) -> None:
    # the only entry with the key is the alias; user@host:port bypasses it (the host key is known)
    cfg = ssh_config.write_config(tmp_path / "config")
    cfg.write_text(f"Host 127.0.0.1\n  UserKnownHostsFile {ssh_config.known_hosts}\n\n" + cfg.read_text())
    direct = f"{ssh_config.user}@127.0.0.1:{ssh_config.port}"
    with pytest.raises(HostUnreachable) as info:
        await _host(direct, ssh_config=[str(cfg)]).run(["true"])
    message = str(info.value)
    assert "authentication refused" in message and "\n" not in message
    assert f"{direct} is a direct address with no IdentityFile" in message
    assert f'use ssh = "{ssh_config.alias}" in hosts.toml' in message


async def test_a_direct_target_with_no_alias_for_its_address_says_where_a_key_could_live(ssh_config: SshServer, tmp_path: Path) -> None:
    cfg = tmp_path / "config"
    cfg.write_text(
        f"Host 127.0.0.1\n  UserKnownHostsFile {ssh_config.known_hosts}\n"
        f"Host elsewhere\n  HostName 127.0.0.2\n  IdentityFile {ssh_config.client_key}\n"
    )
    with pytest.raises(HostUnreachable) as info:
        await _host(f"{ssh_config.user}@127.0.0.1:{ssh_config.port}", ssh_config=[str(cfg)]).run(["true"])
    assert "no IdentityFile applies to it: if the key is set in an alias entry" in str(info.value)
