"""A remote host over SSH (asyncssh): one connection per host, reused for every channel.

- ``~/.ssh/config`` is honoured (aliases, ProxyJump, IdentityFile, UserKnownHostsFile); the
  ssh-agent is used when ``SSH_AUTH_SOCK`` is set. ``$SERVELAB_SSH_CONFIG`` (paths separated by
  ``:``) replaces ~/.ssh/config, e.g. for a test server or a per-project config.
- Host keys are verified against known_hosts; an unknown or changed key is refused, never accepted.
- Keepalives detect a dead link; a lost connection is re-opened with backoff on the next call.
  Reads and file operations are retried across a reconnect (they are idempotent); a command whose
  connection drops while it runs is not re-run (it may have had effects) and raises HostUnreachable.
- A remote command is one string by protocol: it is built only with ``shlex.join(argv)``.
"""

from __future__ import annotations

import asyncio
import errno
import os
import secrets
import shlex
import socket
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asyncssh

from servelab.engines.hosts.base import Completed, Host, HostUnreachable, Streamed
from servelab.engines.hosts.sshconfig import SshTarget, resolve_target, split_target
from servelab.engines.hosts.hostsfile import HostConfig

T = TypeVar("T")
__all__ = ["SshHost", "config_paths", "split_target"]

ENV_SSH_CONFIG = "SERVELAB_SSH_CONFIG"
#: Seconds between reconnect attempts; their sum bounds how long a call waits for the link.
BACKOFF: tuple[float, ...] = (0.0, 0.25, 0.5, 1.0, 2.0)
KEEPALIVE_INTERVAL = 5.0
READ_BLOCK = 1 << 20
KEEPALIVE_COUNT_MAX = 3

#: Errors that mean the link is gone (retry on a new connection when the call is idempotent).
_LINK_ERRORS: tuple[type[BaseException], ...] = (
    asyncssh.ConnectionLost,
    asyncssh.ChannelOpenError,
    asyncssh.DisconnectError,
    ConnectionError,
    BrokenPipeError,
    EOFError,
)
#: Wraps every remote command: pid on stderr's first line, a token in the environment, then the argv itself.
_MARK = 'printf "%s\\n" "$$" >&2; SERVELAB_CALL="$1"; export SERVELAB_CALL; shift; exec "$@"'
#: Stops an interrupted command: only the process that carries the token, and its process group.
_STOP = (
    'tr "\\000" "\\n" < "/proc/$1/environ" 2>/dev/null | grep -qx "SERVELAB_CALL=$2" || exit 0; '
    'kill -TERM -- "-$1" 2>/dev/null || kill -TERM "$1"'
)
#: Refusals that retrying cannot fix.
_FINAL_ERRORS: tuple[type[BaseException], ...] = (asyncssh.HostKeyNotVerifiable, asyncssh.PermissionDenied)


def config_paths() -> list[str] | None:
    """ssh_config files to read: $SERVELAB_SSH_CONFIG, else asyncssh's default (~/.ssh/config)."""
    value = os.environ.get(ENV_SSH_CONFIG)
    if not value:
        return None
    return [p for p in value.split(os.pathsep) if p]


class _Final(HostUnreachable):
    """A refusal that retrying cannot change (host key, authentication, unknown name)."""


class _Client(asyncssh.SSHClient):
    """Tells the host when its connection dies, so the next call reconnects."""

    def __init__(self, host: SshHost) -> None:
        self._host = host
        self._conn: asyncssh.SSHClientConnection | None = None

    def connection_made(self, conn: asyncssh.SSHClientConnection) -> None:
        self._conn = conn

    def connection_lost(self, exc: Exception | None) -> None:
        self._host._lost(self._conn)


class SshHost(Host):
    """A host reached over SSH."""

    def __init__(self, config: HostConfig, *, ssh_config: list[str] | None = None, backoff: tuple[float, ...] = BACKOFF) -> None:
        if config.ssh is None:
            raise ValueError(f"host {config.name} has no ssh target")
        self.config = config
        self._ssh_config = ssh_config if ssh_config is not None else config_paths()
        self._backoff = backoff
        self._conn: asyncssh.SSHClientConnection | None = None
        self._sftp: asyncssh.SFTPClient | None = None
        self._lock = asyncio.Lock()
        self._forwards: dict[int | tuple[str, int], asyncssh.SSHListener] = {}
        #: How many connections this host has opened (the first plus reconnects): shown by tests.
        self.connects = 0
        self._down = False  # the last connection attempt failed its whole backoff

    # -- connection -----------------------------------------------------------------------------
    def _lost(self, conn: asyncssh.SSHClientConnection | None = None) -> None:
        """Forget the connection (``conn``: only if it is still the current one)."""
        if conn is not None and conn is not self._conn:
            return
        old = self._conn
        self._conn = None
        self._sftp = None
        self._forwards.clear()
        if old is not None and conn is None:
            old.close()

    async def _open(self) -> asyncssh.SSHClientConnection:
        host, user, port = split_target(self.config.ssh or "")
        kwargs: dict[str, object] = {
            "keepalive_interval": KEEPALIVE_INTERVAL,
            "keepalive_count_max": KEEPALIVE_COUNT_MAX,
            "connect_timeout": self.config.connect_timeout,
        }
        if user is not None:
            kwargs["username"] = user
        if port is not None:
            kwargs["port"] = port
        if self._ssh_config is not None:
            kwargs["config"] = self._ssh_config
        where = f"{self.name} ({self.config.ssh})"
        try:
            conn, _ = await asyncssh.create_connection(lambda: _Client(self), host, **kwargs)  # type: ignore[arg-type]
        except asyncssh.HostKeyNotVerifiable as exc:
            raise _Final(f"{where}: {self._target().host_key_advice(_one_line(exc))}") from None
        except asyncssh.PermissionDenied:
            raise _Final(f"{where}: authentication refused (no key or agent identity accepted){self._target().auth_hint()}") from None
        except (asyncio.TimeoutError, TimeoutError):
            raise HostUnreachable(f"{where}: connection timed out after {self.config.connect_timeout:g}s") from None
        except socket.gaierror as exc:
            raise _Final(f"{where}: {self._target().resolve_error(_one_line(exc))}") from None
        except (OSError, asyncssh.Error) as exc:
            raise HostUnreachable(f"{where}: cannot connect: {_one_line(exc)}") from None
        self.connects += 1
        return conn

    def _target(self) -> SshTarget:
        """What ssh_config makes of this host's target (for messages that name the real address)."""
        return resolve_target(self.config.ssh or "", self._ssh_config)

    async def connection(self) -> asyncssh.SSHClientConnection:
        """The live connection, opened (with backoff) when there is none."""
        async with self._lock:
            if self._conn is not None:
                return self._conn
            last: HostUnreachable | None = None
            # A host this process never reached gets a short retry (a one-shot command should say
            # "unreachable" in about a second); a link that worked before gets the whole backoff, once:
            # after a whole backoff failed, each call tries once until one connects (a down host's
            # every listing, a dashboard's each second, must not wait the backoff out again).
            backoff = self._backoff[:1] if self._down else self._backoff if self.connects else self._backoff[:2]
            for delay in backoff:
                if delay:
                    await asyncio.sleep(delay)
                try:
                    self._conn = await self._open()
                    self._down = False
                    return self._conn
                except _Final:
                    raise
                except HostUnreachable as exc:
                    last = exc
            assert last is not None
            self._down = True
            raise last

    async def _sftp_client(self) -> asyncssh.SFTPClient:
        conn = await self.connection()
        if self._sftp is None or self._conn is not conn:
            self._sftp = await conn.start_sftp_client()
        return self._sftp

    async def _retry(self, op: Callable[[], Awaitable[T]]) -> T:
        """Run an idempotent operation, reconnecting with backoff when the link drops."""
        last: BaseException | None = None
        for delay in self._backoff:
            if delay:
                await asyncio.sleep(delay)
            try:
                return await op()
            except _FINAL_ERRORS:
                raise
            except _LINK_ERRORS as exc:
                last = exc
                self._lost()
        raise HostUnreachable(f"{self.name} ({self.config.ssh}): connection keeps dropping: {_one_line(last)}")

    async def reconnect(self) -> None:
        """Drop the current connection (if any); the next call opens a new one."""
        self._lost()

    # -- commands -------------------------------------------------------------------------------
    async def _run(self, argv: list[str], input: bytes | None, env: dict[str, str] | None, cwd: str | None, timeout: float | None) -> Completed:
        words = list(argv)
        if env:
            # Servers accept few variables over the protocol; `env NAME=VALUE... argv` always works.
            words = ["env", *(f"{k}={v}" for k, v in env.items()), *words]
        if cwd is not None:
            # A constant script; the directory and argv arrive as positional parameters, literally.
            words = ["sh", "-c", 'cd -- "$1" && shift && exec "$@"', "sh", cwd, *words]
        # A constant script: it says its pid on stderr's first line and marks its environment with a
        # token, so an interrupted command (Ctrl-C, timeout) can be stopped on the host, and only it.
        opened = await self._open_marked(words, asyncssh.PIPE if input is not None else asyncssh.DEVNULL)
        if opened is None:
            raise HostUnreachable(f"{self.name} ({self.config.ssh}): cannot open a channel")
        conn, proc, token = opened
        pid = ""
        try:
            async with asyncio.timeout(timeout):
                pid = bytes(await proc.stderr.readline()).decode("ascii", "replace").strip()
                if input is not None:  # communicate() sends no EOF for empty input: the command would wait on stdin
                    try:
                        proc.stdin.write(input)
                        proc.stdin.write_eof()
                    except BrokenPipeError:
                        pass  # it exited (or closed stdin) before reading: its output and status still come
                out, err = await proc.communicate()
        except (asyncio.TimeoutError, TimeoutError, asyncio.CancelledError):
            # Timed out, or the user interrupted (Ctrl-C): what servelab started on the host must
            # not run on. Closing the channel alone leaves the remote process running.
            if not pid.isdigit():  # interrupted before the pid line arrived: it is on its way
                pid = await _first_line(proc)
            proc.close()
            if pid.isdigit():
                await self._stop_remote(conn, pid, token)
            raise
        except _LINK_ERRORS as exc:
            self._lost()
            raise HostUnreachable(f"{self.name}: connection lost while running {argv[0]}: {_one_line(exc)}") from None
        status = proc.exit_status
        if status is None and proc.exit_signal is None:
            # The channel closed with neither an exit status nor a signal: the server's session was cut
            # (the host went away mid-command), not a command that died; never a made-up exit code.
            self._lost(conn)
            raise HostUnreachable(f"{self.name}: connection lost while running {argv[0]}: the session ended without an exit status")
        if status is None or status < 0:
            status = 128 + 9 if proc.exit_signal is None else 128 + _signal_number(proc.exit_signal[0])
        return Completed(list(argv), status, bytes(out or b""), bytes(err or b""))

    async def stream(self, argv: list[str], *, env: dict[str, str] | None = None) -> Streamed:
        words = ["env", *(f"{k}={v}" for k, v in env.items()), *argv] if env else list(argv)
        opened = await self._open_marked(words, asyncssh.DEVNULL)
        if opened is None:
            raise HostUnreachable(f"{self.name} ({self.config.ssh}): cannot open a channel")
        conn, proc, token = opened
        stream = SshStream(self, conn, proc, token)
        try:
            stream.pid = await _first_line(proc, timeout=self.config.connect_timeout)
        except asyncio.CancelledError:
            await stream.close()
            raise
        return stream

    async def _open_marked(self, words: list[str], stdin: Any) -> tuple[asyncssh.SSHClientConnection, asyncssh.SSHClientProcess[bytes], str] | None:
        """``words`` started on the host under the constant marking script (its pid on stderr's first
        line, a fresh token in its environment), retried on a new connection while the channel cannot
        be opened (the command never started, so that is safe); None when it never could be."""
        token = secrets.token_hex(8)
        command = shlex.join(["sh", "-c", _MARK, "sh", token, *words])
        for delay in self._backoff:
            if delay:
                await asyncio.sleep(delay)
            conn = await self.connection()
            try:
                proc = await conn.create_process(command, encoding=None, stdin=stdin)
            except _LINK_ERRORS:
                self._lost()
                continue
            return conn, proc, token
        return None

    async def _stop_remote(self, conn: asyncssh.SSHClientConnection, pid: str, token: str) -> None:
        """SIGTERM to an interrupted command's process group, if that process still carries our token."""
        try:
            async with asyncio.timeout(5.0):
                await conn.run(shlex.join(["sh", "-c", _STOP, "sh", pid, token]), check=False)
        except (asyncio.TimeoutError, TimeoutError, asyncio.CancelledError, OSError, asyncssh.Error):
            pass  # the link is gone too: nothing more can be done from here

    # -- files (SFTP) ---------------------------------------------------------------------------
    async def read_bytes(self, path: str, offset: int = 0, limit: int | None = None) -> bytes:
        async def op() -> bytes:
            sftp = await self._sftp_client()
            try:
                async with sftp.open(path, "rb") as f:
                    if limit is not None:
                        data = await f.read(limit, offset) if limit > 0 else b""
                    else:  # to the end; /proc files report size 0, so read until the server says EOF
                        parts: list[bytes] = []
                        pos = offset
                        while part := await f.read(READ_BLOCK, pos):
                            parts.append(_as_bytes(part))
                            pos += len(part)
                        data = b"".join(parts)
            except asyncssh.SFTPError as exc:
                raise _os_error(exc, path) from None
            return _as_bytes(data)

        return await self._retry(op)

    async def write_bytes(self, path: str, data: bytes) -> None:
        async def op() -> None:
            sftp = await self._sftp_client()
            parent = os.path.dirname(path)
            tmp = os.path.join(parent, f".{os.path.basename(path)}.tmp-{secrets.token_hex(4)}")
            try:
                if parent:
                    await sftp.makedirs(parent, exist_ok=True)
                async with sftp.open(tmp, "wb") as f:
                    await f.write(data)
                await sftp.posix_rename(tmp, path)
            except asyncssh.SFTPError as exc:
                if await sftp.exists(tmp):
                    await sftp.remove(tmp)
                raise _os_error(exc, path) from None

        await self._retry(op)

    async def make_shared_dir(self, path: str) -> None:
        await self._make_dir(path, 0o1777)

    async def make_private_dir(self, path: str) -> None:
        await self._make_dir(path, 0o755)

        async def op() -> tuple[int | None, int | None]:
            sftp = await self._sftp_client()
            return (await sftp.stat(path)).uid, (await sftp.stat(".")).uid  # the login's home is its own

        try:
            made_by, me = await self._retry(op)
        except asyncssh.SFTPError as exc:
            raise _os_error(exc, path) from None
        if made_by is not None and me is not None and made_by != me:
            raise PermissionError(errno.EPERM, "made by another user, not yours", path)

    async def _make_dir(self, path: str, mode: int) -> None:
        async def op() -> None:
            sftp = await self._sftp_client()
            parent = os.path.dirname(path)
            try:
                if parent:
                    await sftp.makedirs(parent, exist_ok=True)
                if await sftp.isdir(path):
                    return
                await sftp.mkdir(path)
                await sftp.chmod(path, mode)
            except asyncssh.SFTPError as exc:
                if await sftp.isdir(path):  # made by another client meanwhile
                    return
                raise _os_error(exc, path) from None

        await self._retry(op)

    async def exists(self, path: str) -> bool:
        async def op() -> bool:
            sftp = await self._sftp_client()
            return bool(await sftp.exists(path))

        return await self._retry(op)

    async def size(self, path: str) -> int:
        async def op() -> int:
            sftp = await self._sftp_client()
            try:
                attrs = await sftp.stat(path)
            except asyncssh.SFTPError as exc:
                raise _os_error(exc, path) from None
            return int(attrs.size or 0)

        return await self._retry(op)

    async def listdir(self, path: str) -> list[str]:
        async def op() -> list[str]:
            sftp = await self._sftp_client()
            try:
                names = await sftp.listdir(path)
            except (asyncssh.SFTPNoSuchFile, asyncssh.SFTPFailure):
                return []
            return sorted(str(n) for n in names if n not in (".", ".."))

        return await self._retry(op)

    # -- ports ----------------------------------------------------------------------------------
    async def forward_port(self, remote_port: int, remote_host: str = "127.0.0.1") -> int:
        async def op() -> int:
            conn = await self.connection()
            key = remote_port if remote_host == "127.0.0.1" else (remote_host, remote_port)
            listener = self._forwards.get(key)
            if listener is None:
                listener = await conn.forward_local_port("127.0.0.1", 0, remote_host, remote_port)
                self._forwards[key] = listener
            return int(listener.get_port())

        return await self._retry(op)

    async def close(self) -> None:
        conn = self._conn
        self._lost()
        if conn is not None:
            conn.close()
            try:
                await asyncio.wait_for(conn.wait_closed(), 5)
            except (asyncio.TimeoutError, TimeoutError):
                pass


class SshStream(Streamed):
    """A streamed command over one channel; :meth:`close` closes the channel and SIGTERMs the
    command's process group on the host (only if it still carries this call's token)."""

    def __init__(self, host: SshHost, conn: asyncssh.SSHClientConnection, proc: asyncssh.SSHClientProcess[bytes], token: str) -> None:
        self.host, self.conn, self.proc, self.token = host, conn, proc, token
        self.pid = ""
        self.closed = False

    async def readline(self) -> bytes:
        try:
            return bytes(await self.proc.stdout.readline())
        except _LINK_ERRORS as exc:
            self.host._lost(self.conn)
            raise HostUnreachable(f"{self.host.name}: connection lost while streaming: {_one_line(exc)}") from None

    async def finish(self) -> tuple[int | None, bytes]:
        try:
            err = bytes(await self.proc.stderr.read())
            await self.proc.wait_closed()
        except _LINK_ERRORS:
            return None, b""
        return self.proc.exit_status, err

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            if self.pid.isdigit() and self.proc.exit_status is None:
                # SIGTERM first, its channel still open: a closed stdout alone ends it on a broken pipe,
                # before it could end what it started
                await self.host._stop_remote(self.conn, self.pid, self.token)
        finally:
            self.proc.close()


async def _first_line(proc: asyncssh.SSHClientProcess[bytes], timeout: float = 2.0) -> str:
    try:
        async with asyncio.timeout(timeout):
            return bytes(await proc.stderr.readline()).decode("ascii", "replace").strip()
    except (asyncio.TimeoutError, TimeoutError, OSError, asyncssh.Error):
        return ""


def _signal_number(name: str) -> int:
    import signal

    try:
        return int(signal.Signals[f"SIG{name}"])
    except KeyError:
        return 9


def _os_error(exc: asyncssh.SFTPError, path: str) -> OSError:
    """An SFTP failure as the OSError a local file operation would raise."""
    import errno

    if isinstance(exc, asyncssh.SFTPNoSuchFile):
        return FileNotFoundError(errno.ENOENT, "No such file or directory", path)
    if isinstance(exc, asyncssh.SFTPPermissionDenied):
        return PermissionError(errno.EACCES, "Permission denied", path)
    return OSError(errno.EIO, _one_line(exc), path)


def _one_line(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown error"
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())


def _as_bytes(data: str | bytes) -> bytes:
    """A file opened ``"rb"`` reads bytes; asyncssh types ``read()`` as ``str | bytes``."""
    return data if isinstance(data, bytes) else data.encode("utf-8")
