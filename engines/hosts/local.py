"""This machine as a host: asyncio subprocesses and plain file operations.

It behaves exactly like an SSH host (argv only, atomic writes, FileNotFoundError for absent files)
so the run lifecycle never needs to know where it runs.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from pathlib import Path

from servelab.engines.hosts.base import Completed, Host
from servelab.engines.hostsfile import HostConfig


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
            proc.kill()
            await proc.wait()
            raise
        return Completed(list(argv), proc.returncode if proc.returncode is not None else -1, out, err)

    async def read_bytes(self, path: str, offset: int = 0, limit: int | None = None) -> bytes:
        return await asyncio.to_thread(_read, path, offset, limit)

    async def write_bytes(self, path: str, data: bytes) -> None:
        await asyncio.to_thread(_write_atomic, path, data)

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


def _read(path: str, offset: int, limit: int | None) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(-1 if limit is None else limit)


def _write_atomic(path: str, data: bytes) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{secrets.token_hex(4)}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
