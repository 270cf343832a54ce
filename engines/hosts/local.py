"""This machine as a host: asyncio subprocesses and plain file operations.

It behaves exactly like an SSH host (argv only, atomic writes, FileNotFoundError for absent files)
so the run lifecycle never needs to know where it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
from pathlib import Path

from servelab.engines.helpers import hostlib
from servelab.engines.hosts.base import Completed, Host, Streamed
from servelab.engines.hosts.hostsfile import HostConfig
from servelab.engines.atomic_write import write_atomic


class LocalHost(Host):
    """Runs argv lists with asyncio subprocesses; no shell anywhere."""

    def __init__(self, config: HostConfig) -> None:
        self.config = config

    async def _run(self, argv: list[str], input: bytes | None, env: dict[str, str] | None, cwd: str | None, timeout: float | None) -> Completed:
        full_env = {**os.environ, **(env or {})}
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=full_env,
                cwd=cwd,
            )
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            # Same outcome a remote shell gives for a missing program: exit 127 and a message.
            return Completed(list(argv), 127, b"", f"{argv[0]}: {exc.strerror}\n".encode())
        try:
            out, err = await asyncio.wait_for(proc.communicate(input), timeout)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            # The command may have ended on its own just as the wait was cancelled or timed out:
            # killing an ended process raises ProcessLookupError, which would hide the cancel.
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            _stop_reading(proc)
            try:
                await proc.wait()
            finally:
                _close_transport(proc)
            raise
        return Completed(list(argv), proc.returncode if proc.returncode is not None else -1, out, err)

    async def stream(self, argv: list[str], *, env: dict[str, str] | None = None) -> Streamed:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={**os.environ, **(env or {})},
                start_new_session=True,  # its own group: close() can end what it started too
            )
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            return _Ended(127, f"{argv[0]}: {exc.strerror}\n".encode())
        return LocalStream(proc)

    async def read_bytes(self, path: str, offset: int = 0, limit: int | None = None) -> bytes:
        return await asyncio.to_thread(_read, path, offset, limit)

    async def write_bytes(self, path: str, data: bytes) -> None:
        await asyncio.to_thread(_write_atomic, path, data)

    async def make_shared_dir(self, path: str) -> None:
        await asyncio.to_thread(hostlib.shared_dir, path)

    async def make_private_dir(self, path: str) -> None:
        await asyncio.to_thread(hostlib.make_dir, path, 0o755)
        if os.stat(path).st_uid != os.geteuid():
            raise PermissionError(errno.EPERM, "made by another user, not yours", path)

    async def exists(self, path: str) -> bool:
        return os.path.exists(path)

    async def size(self, path: str) -> int:
        return os.stat(path).st_size

    async def listdir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except (FileNotFoundError, NotADirectoryError):
            return []

    async def forward_port(self, remote_port: int, remote_host: str = "127.0.0.1") -> int:
        return remote_port

    async def close(self) -> None:
        return None


class LocalStream(Streamed):
    """A streamed command on this machine: a child process in its own process group."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.pid = proc.pid

    async def readline(self) -> bytes:
        assert self.proc.stdout is not None
        return await self.proc.stdout.readline()

    async def finish(self) -> tuple[int | None, bytes]:
        assert self.proc.stderr is not None
        err = await self.proc.stderr.read()
        return await self.proc.wait(), err

    async def close(self) -> None:
        try:
            if self.proc.returncode is None:
                try:  # the group our child leads (start_new_session), as an SSH stream's close does; before any await
                    os.killpg(self.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                _stop_reading(self.proc)
                try:
                    await asyncio.wait_for(self.proc.wait(), 5.0)
                except (asyncio.TimeoutError, TimeoutError):
                    try:
                        os.killpg(self.pid, signal.SIGKILL)  # the group it leads (start_new_session)
                    except ProcessLookupError:
                        pass
                    await self.proc.wait()
        finally:
            _close_transport(self.proc)


def _stop_reading(proc: asyncio.subprocess.Process) -> None:
    """Close the child's pipes (what it wrote and nobody read is dropped), without ending it.

    ``Process.wait()`` returns only once the child has ended *and* its pipes are closed. A reader that
    stopped reading (a cancelled ``communicate``, a stream read to its first lines) leaves the pipe
    paused once its buffer is full (128 KiB), so the end of file never arrives and ``wait()`` never
    returns: a cancelled command that had printed more than that hung its caller for good.
    """
    transport = getattr(proc, "_transport", None)
    for fd in (0, 1, 2):
        pipe = transport.get_pipe_transport(fd) if transport is not None else None
        if pipe is not None:
            pipe.close()


def _close_transport(proc: asyncio.subprocess.Process) -> None:
    """Close a finished (or abandoned) child's transport now, while the event loop runs.

    Output nobody read keeps a pipe open after the child ended; asyncio then closes it when the
    transport is collected, after the loop has closed, and prints "Exception ignored in
    BaseSubprocessTransport.__del__ ... Event loop is closed" on the user's terminal (a dashboard
    that quits while a sampler runs). ``asyncio.subprocess.Process`` has no public close: its
    transport's ``close`` (which also kills a child still running) is the one way.
    """
    transport = getattr(proc, "_transport", None)
    if transport is not None:
        transport.close()


class _Ended(Streamed):
    """A command that could not start: no line, its exit code and message."""

    def __init__(self, code: int, err: bytes) -> None:
        self.code, self.err = code, err

    async def readline(self) -> bytes:
        return b""

    async def finish(self) -> tuple[int | None, bytes]:
        return self.code, self.err

    async def close(self) -> None:
        return None


def _read(path: str, offset: int, limit: int | None) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(-1 if limit is None else limit)


def _write_atomic(path: str, data: bytes) -> None:
    write_atomic(Path(path), data)
