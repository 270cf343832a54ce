"""The one interface every host implements (local subprocesses, or SSH via asyncssh).

Everything that touches a host goes through it: running an argv (never a shell string built from
user values), reading and writing files, following a log from a byte offset, and reaching a port
of the host. The run lifecycle (``engines/runs/manager.py``), preflight and patches are written against
this interface only, so they behave the same on this machine and on a remote GPU host.
"""

from __future__ import annotations

from dataclasses import dataclass
from abc import ABC, abstractmethod

from servelab.engines.hosts.owner import me
from servelab.engines.hosts.hostsfile import HostConfig


@dataclass(frozen=True)
class Completed:
    """A finished command on a host."""

    argv: list[str]
    exit_code: int
    stdout: bytes
    stderr: bytes

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace")


def host_workdir(host: HostConfig) -> str:
    """The workdir as a path the host accepts: over SSH, ``~/x`` is ``x`` (SFTP and commands start in home)."""
    workdir = host.workdir.rstrip("/") or "/"
    if not host.is_local and workdir.startswith("~/"):
        return workdir[2:] or "."
    return workdir


#: The folder of a workdir that holds each user's own files (helpers, caches), one folder per user.
PRIVATE_ROOT = ".servelab"


def private_dir(host: HostConfig) -> str:
    """Where this user's servelab keeps its own files in ``host``'s workdir (uploaded helpers,
    caches): ``<workdir>/.servelab/<user>``. A workdir shared by several operators is shared safely:
    ``.servelab`` is made for everyone (:meth:`Host.make_shared_dir`), and what one user's servelab
    runs is never a file another user wrote."""
    return f"{host_workdir(host)}/{PRIVATE_ROOT}/{me().user}"


def place_of(host: HostConfig) -> tuple[str, str]:
    """Where a host keeps its runs: its machine (the SSH target as written, or this machine) and its
    workdir. Two host entries with one place are one folder of runs, listed once."""
    return (host.ssh or "local", host_workdir(host))


class Streamed(ABC):
    """A command running on a host whose stdout is read as it comes, a line at a time (a sampler
    printing one JSON line a second). :meth:`close` ends it on the host, and only it."""

    @abstractmethod
    async def readline(self) -> bytes:
        """The next line of its stdout; ``b""`` once it has ended."""

    @abstractmethod
    async def finish(self) -> tuple[int | None, bytes]:
        """Once stdout has ended: its exit code (None when unknown) and what it said on stderr."""

    @abstractmethod
    async def close(self) -> None:
        """End it: SIGTERM to the command on the host (to its process group where it leads one; a
        command that starts children ends them on SIGTERM, as the host scripts do); idempotent."""


class HostUnreachable(Exception):
    """The host cannot be reached now (refused, timed out, unknown host key...). Message is one line."""


class Host(ABC):
    """A machine where engines run: ``LocalHost`` (this machine) and ``SshHost`` implement it."""

    config: HostConfig

    @property
    def name(self) -> str:
        return self.config.name

    async def run(
        self,
        argv: list[str],
        *,
        input: bytes | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = 60.0,
    ) -> Completed:
        """Run an argv to completion on the host (each element reaches the program as one literal argument)."""
        return await self._run(argv, input, env, cwd, timeout)

    @abstractmethod
    async def _run(self, argv: list[str], input: bytes | None, env: dict[str, str] | None, cwd: str | None, timeout: float | None) -> Completed:
        """``run``, every argument given."""

    @abstractmethod
    async def stream(self, argv: list[str], *, env: dict[str, str] | None = None) -> Streamed:
        """Start an argv on the host and read its stdout as it comes (:class:`Streamed`); the caller
        closes it. A program that cannot start reads as an immediate end with exit code 127."""

    @abstractmethod
    async def read_bytes(self, path: str, offset: int = 0, limit: int | None = None) -> bytes:
        """Bytes of a file from ``offset`` (at most ``limit``); FileNotFoundError if absent."""

    @abstractmethod
    async def write_bytes(self, path: str, data: bytes) -> None:
        """Write a file atomically (temp file + rename), creating parent folders."""

    @abstractmethod
    async def make_shared_dir(self, path: str) -> None:
        """Make the folder ``path`` (its parents as usual) for every user of the host, as /tmp is
        (mode 1777: anyone adds an entry, only its owner removes it); a folder already there is left
        as it is (a workdir's shared folders: ``runs/``, ``.servelab/``)."""

    @abstractmethod
    async def make_private_dir(self, path: str) -> None:
        """Make the folder ``path`` this user's (mode 755); one already there must be this user's
        (PermissionError otherwise: a folder another user made, whose files this user would run)."""

    @abstractmethod
    async def exists(self, path: str) -> bool: ...

    @abstractmethod
    async def size(self, path: str) -> int:
        """Size of a file in bytes; FileNotFoundError if absent (follow uses it to notice truncation)."""

    @abstractmethod
    async def listdir(self, path: str) -> list[str]:
        """Names in a folder ([] if it does not exist)."""

    @abstractmethod
    async def forward_port(self, remote_port: int, remote_host: str = "127.0.0.1") -> int:
        """A port on this machine that reaches ``remote_port`` on the host's loopback, or on
        ``remote_host`` as the host reaches it (a batch job's head node from its login node);
        local: the same port."""

    @abstractmethod
    async def close(self) -> None: ...
