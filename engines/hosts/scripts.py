"""Host scripts: the one way servelab runs a script of its own on a host.

A script (``runctl.py``, ``hostinfo.py``, ``patchtool.py``, ``validate_args.py``, ``timed_client.py``...)
is uploaded once per content hash to ``<workdir>/.servelab/helpers/<name>-<sha12>.py`` (atomically:
the hosts layer writes a temp file and renames it, so two dashboards racing never run a half-written
file), remembered per host for the life of the process, then run as ``python <path> ARGS`` with the
argv list the host is given (over SSH it is quoted with ``shlex.join``; never a shell string).

The cache is checked for free: when the file has gone (workdir wiped, a tmpfs after a reboot),
Python says it cannot open it; the script is uploaded again and the call retried, once.
"""

from __future__ import annotations

import asyncio
import hashlib
import weakref
from dataclasses import dataclass
from functools import cached_property

from servelab.engines.errors import ServelabError
from servelab.engines.hosts.base import Completed, Host, host_workdir
from servelab.engines.hostsfile import HostConfig

#: Where scripts live under a host's workdir.
SCRIPTS_DIR = ".servelab/helpers"
#: Python's exit status when it cannot open the script it was given.
_CANNOT_OPEN_EXIT = 2


class ScriptUploadError(ServelabError):
    """A script could not be written on the host (read-only or full workdir...). One line."""


@dataclass(frozen=True)
class HostScript:
    """A standard-library script servelab ships, by file name and content."""

    name: str
    source: bytes

    @cached_property
    def sha12(self) -> str:
        return hashlib.sha256(self.source).hexdigest()[:12]

    def path_on(self, host: HostConfig) -> str:
        """Where this version of the script lives on ``host`` (a new text is a new file)."""
        stem = self.name[:-3] if self.name.endswith(".py") else self.name
        return f"{host_workdir(host)}/{SCRIPTS_DIR}/{stem}-{self.sha12}.py"

    def argv(self, host: HostConfig, python: str, *args: str) -> list[str]:
        """``python <path> ARGS...``: one literal argument each."""
        return [python, self.path_on(host), *args]


def _cache_key(host: HostConfig, path: str) -> tuple[str, str, str]:
    """Per host: a local host and an SSH host of the same name (or workdir) never share an entry."""
    return (host.name, host.ssh or "local", path)


class HostScripts:
    """Uploads scripts once per host and content, and runs them; one per process (:data:`SCRIPTS`)."""

    def __init__(self) -> None:
        self._ready: set[tuple[str, str, str]] = set()
        #: Locks belong to an event loop: one set per loop, so concurrent first calls upload once.
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str, str], asyncio.Lock]] = (
            weakref.WeakKeyDictionary()
        )
        #: How many files this process wrote to hosts, and how many times it asked whether one was
        #: there (shown by tests and the bench: once per host and script version, not per call).
        self.uploads = 0
        self.checks = 0

    async def ensure(self, host: Host, script: HostScript) -> str:
        """The script's path on ``host``, uploaded if this process has not seen it there."""
        path = script.path_on(host.config)
        key = _cache_key(host.config, path)
        if key in self._ready:
            return path
        locks = self._locks.setdefault(asyncio.get_running_loop(), {})
        async with locks.setdefault(key, asyncio.Lock()):
            if key in self._ready:
                return path  # uploaded by a concurrent call while this one waited
            self.checks += 1
            if not await host.exists(path):
                try:
                    await host.write_bytes(path, script.source)
                except OSError as exc:
                    why = exc.strerror or str(exc)
                    raise ScriptUploadError(f"{host.name}: cannot upload {script.name} to {path}: {why}") from None
                self.uploads += 1
            self._ready.add(key)
        return path

    async def run(
        self,
        host: Host,
        python: str,
        script: HostScript,
        *args: str,
        input: bytes | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = 60.0,
    ) -> Completed:
        """Run ``python <script> ARGS`` on ``host``; a vanished upload is put back and the call retried once."""
        path = await self.ensure(host, script)
        done = await host.run(script.argv(host.config, python, *args), input=input, env=env, timeout=timeout)
        if _cannot_open(done, path):
            self._ready.discard(_cache_key(host.config, path))
            await self.ensure(host, script)
            done = await host.run(script.argv(host.config, python, *args), input=input, env=env, timeout=timeout)
        return done


def _cannot_open(done: Completed, path: str) -> bool:
    """Python's own refusal of a script path (``python: can't open file '<path>': [Errno 2] ...``)."""
    if done.exit_code != _CANNOT_OPEN_EXIT:
        return False
    name = path.rsplit("/", 1)[-1].encode()
    return any(b"can't open file" in line and name in line for line in done.stderr.splitlines()[:3])


#: The process's one cache of uploaded scripts.
SCRIPTS = HostScripts()
