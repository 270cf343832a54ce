"""Host scripts: the one way servelab runs a script of its own on a host.

A script (``runctl.py``, ``hostinfo.py``, ``patchtool.py``, ``validate_args.py``, ``timed_client.py``...)
travels as a bundle: the script plus the modules of its folder it imports (``HostScript.from_folder``
reads its ``import``/``from`` statements, and theirs), so host scripts share code (``hostlib.py``)
though each is run alone. A script that imports none is uploaded once per content hash to
``<workdir>/.servelab/<user>/helpers/<name>-<sha12>.py``; a bundle to the folder
``<workdir>/.servelab/<user>/helpers/<name>-<sha12>/`` (the hash of every file in it), the modules first and
the script last, each file atomically (the hosts layer writes a temp file and renames it), so a
bundle whose script is there is whole and two dashboards racing never run a half-written file. The
upload is remembered per host for the life of the process, and the script run as
``python <path> ARGS`` (Python puts the bundle's folder first on ``sys.path``, so ``import hostlib``
finds the bundle's copy) with the argv list the host is given (over SSH it is quoted with
``shlex.join``; never a shell string).

Each user uploads to a folder of its own (``hosts.base.private_dir``): on a workdir that several
operators share, a user's servelab never runs a helper another user wrote.

The cache is checked for free: when the file or the bundle has gone (workdir wiped, a tmpfs after a
reboot), Python says it cannot open it; when a bundle lost a module, the import says which: the
script is uploaded again and the call retried, once.
"""

from __future__ import annotations

import ast
import asyncio
import hashlib
import weakref
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from servelab.engines.errors import ServelabError
from servelab.engines.hosts.base import PRIVATE_ROOT, Completed, Host, Streamed, host_workdir, private_dir
from servelab.engines.hosts.hostsfile import HostConfig

#: Where scripts live under this user's folder of a host's workdir (``hosts.base.private_dir``).
SCRIPTS_DIR = "helpers"
#: Python's exit status when it cannot open the script it was given.
_CANNOT_OPEN_EXIT = 2


class ScriptUploadError(ServelabError):
    """A script could not be written on the host (read-only or full workdir...). One line."""


@dataclass(frozen=True)
class HostScript:
    """A standard-library script servelab ships, by file name and content, with the modules it imports."""

    name: str
    source: bytes
    #: (file name, content) of each module of the script's folder it imports, directly or not.
    modules: tuple[tuple[str, bytes], ...] = ()

    @classmethod
    def from_folder(cls, folder: Path, name: str) -> HostScript:
        """``folder/name`` and the modules of ``folder`` it imports (``import x``, ``from x import``,
        ``from . import x``, at any depth of the file), then theirs, read now."""
        source = (folder / name).read_bytes()
        found: dict[str, bytes] = {}
        todo = [source]
        while todo:
            for mod in sorted(_local_imports(todo.pop(), folder)):
                file = f"{mod}.py"
                if file != name and file not in found:
                    found[file] = (folder / file).read_bytes()
                    todo.append(found[file])
        return cls(name, source, tuple(sorted(found.items())))

    @cached_property
    def sha12(self) -> str:
        """The content hash: of the script alone, or of every file of the bundle (names and texts)."""
        if not self.modules:
            return hashlib.sha256(self.source).hexdigest()[:12]
        digest = hashlib.sha256()
        for file, data in ((self.name, self.source), *self.modules):
            digest.update(b"%d:%s\0%d:" % (len(file), file.encode(), len(data)) + data)
        return digest.hexdigest()[:12]

    @property
    def stem(self) -> str:
        return self.name[:-3] if self.name.endswith(".py") else self.name

    def folder_on(self, host: HostConfig) -> str | None:
        """The bundle's folder on ``host``; None for a script that imports nothing (one file)."""
        return f"{private_dir(host)}/{SCRIPTS_DIR}/{self.stem}-{self.sha12}" if self.modules else None

    def path_on(self, host: HostConfig) -> str:
        """Where this version of the script lives on ``host`` (a new text is a new file or folder)."""
        folder = self.folder_on(host)
        if folder is not None:
            return f"{folder}/{self.name}"
        return f"{private_dir(host)}/{SCRIPTS_DIR}/{self.stem}-{self.sha12}.py"

    def files_on(self, host: HostConfig) -> list[tuple[str, bytes]]:
        """(path, content) to write for an upload, in order: the modules first, the script last."""
        folder = self.folder_on(host)
        if folder is None:
            return [(self.path_on(host), self.source)]
        return [(f"{folder}/{file}", data) for file, data in self.modules] + [(self.path_on(host), self.source)]

    def argv(self, host: HostConfig, python: str, *args: str) -> list[str]:
        """``python <path> ARGS...``: one literal argument each."""
        return [python, self.path_on(host), *args]


async def make_private(host: Host) -> None:
    """This user's folder of ``host``'s workdir, inside ``.servelab`` made for every user."""
    await host.make_shared_dir(f"{host_workdir(host.config)}/{PRIVATE_ROOT}")
    await host.make_private_dir(private_dir(host.config))


def _local_imports(source: bytes, folder: Path) -> set[str]:
    """Names of the modules of ``folder`` that ``source`` imports (never the package's ``__init__``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level <= 1:
            if node.module:
                names.add(node.module.split(".")[0])
            elif node.level == 1:
                names.update(alias.name for alias in node.names)
    return {n for n in names if n != "__init__" and (folder / f"{n}.py").is_file()}


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

    async def ensure(self, host: Host, script: HostScript, *, force: bool = False) -> str:
        """The script's path on ``host``, uploaded if this process has not seen it there (``force``:
        written again even though the script is there: its bundle lost a module)."""
        path = script.path_on(host.config)
        key = _cache_key(host.config, path)
        if key in self._ready and not force:
            return path
        locks = self._locks.setdefault(asyncio.get_running_loop(), {})
        async with locks.setdefault(key, asyncio.Lock()):
            if key in self._ready and not force:
                return path  # uploaded by a concurrent call while this one waited
            self.checks += 1
            if force or not await host.exists(path):
                try:
                    await make_private(host)
                    for file, data in script.files_on(host.config):
                        await host.write_bytes(file, data)
                except OSError as exc:
                    why = exc.strerror or str(exc)
                    where = exc.filename or path
                    raise ScriptUploadError(f"{host.name}: cannot upload {script.name} to {path}: {where}: {why}") from None
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
        gone = _gone(done, script, path)
        if gone:
            self._ready.discard(_cache_key(host.config, path))
            await self.ensure(host, script, force=gone == "module")
            done = await host.run(script.argv(host.config, python, *args), input=input, env=env, timeout=timeout)
        return done

    async def stream(self, host: Host, python: str, script: HostScript, *args: str, env: dict[str, str] | None = None) -> Streamed:
        """Start ``python <script> ARGS`` on ``host`` and read its stdout as it comes; the caller closes it."""
        await self.ensure(host, script)
        return await host.stream(script.argv(host.config, python, *args), env=env)

    async def recover(self, host: Host, script: HostScript, ended: Completed) -> bool:
        """A stream that ended before its first line: when its upload had gone, put it back (True:
        start the stream again, once)."""
        path = script.path_on(host.config)
        gone = _gone(ended, script, path)
        if not gone:
            return False
        self._ready.discard(_cache_key(host.config, path))
        await self.ensure(host, script, force=gone == "module")
        return True


def _gone(done: Completed, script: HostScript, path: str) -> str | None:
    """What has gone: ``script`` when Python cannot open the script (``python: can't open file '<path>':
    [Errno 2] ...``), ``module`` when a module of its bundle is missing (``No module named 'hostlib'``), else None."""
    if done.exit_code == _CANNOT_OPEN_EXIT:
        # the file's name, and for a bundle its folder's (the home folder may be spelled out in the message)
        name = "/".join(path.rsplit("/", 2)[-2:] if script.modules else path.rsplit("/", 1)[-1:]).encode()
        if any(b"can't open file" in line and name in line for line in done.stderr.splitlines()[:3]):
            return "script"
    if done.exit_code != 0 and script.modules:
        tail = done.stderr.splitlines()[-1:]
        missing = {b"ModuleNotFoundError: No module named '%s'" % file[:-3].encode() for file, _ in script.modules}
        if tail and tail[0].strip() in missing:
            return "module"
    return None


#: The process's one cache of uploaded scripts.
SCRIPTS = HostScripts()
