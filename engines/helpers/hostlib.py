"""What servelab's host scripts share: JSON files written atomically, /proc reads, the detached start.

Standard library only, never a servelab import: it runs with the host's own Python. A host script
imports it as ``import hostlib`` (it reaches the host in the script's bundle, beside the script:
``engines/hosts/scripts.py``; Python puts the script's folder first on ``sys.path``), and as
``from . import hostlib`` when servelab imports the script as a module of its own package.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import IO, Any


# -- files ----------------------------------------------------------------------------------------
def read_json(path: str) -> Any:
    """The JSON value in a file, None when it is missing or not JSON."""
    try:
        with open(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError):
        return None


#: Shared-memory names of every engine (Python, torch, NCCL, CUDA); a run adds its adapter's
#: ``shm_prefixes`` (run.json). Cleanup only ever considers these, never another program's files.
COMMON_SHM_PREFIXES = ("psm_", "sem.mp-", "torch_", "nccl", "cuda.shm")


def shm_prefixes(rec: dict[str, Any]) -> tuple[str, ...]:
    """The /dev/shm name prefixes a run's files may have: everyone's and its engine's own."""
    return COMMON_SHM_PREFIXES + tuple(str(p) for p in rec.get("shm_prefixes") or ())


def write_atomic(path: str, data: bytes) -> None:
    """Write a file through a temp file and a rename: a reader sees the old text or the new, whole."""
    tmp = "%s.tmp-%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def make_dir(path: str, mode: int) -> None:
    """The folder ``path`` made with ``mode`` exactly (the umask aside; its parents as usual) when it
    is not there; one already there is left as it is."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    try:
        os.mkdir(path)
    except FileExistsError:
        return
    os.chmod(path, mode)


def shared_dir(path: str) -> None:
    """Make the folder ``path`` for every user of the host, as /tmp is (1777: anyone adds an entry,
    only its owner removes it); one already there is left as it is."""
    make_dir(path, 0o1777)


def open_lock(path: str) -> IO[bytes]:
    """A lock file every user of the host can flock: opened for reading (all flock needs), made
    readable by all when it is not there yet."""
    fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
    return os.fdopen(fd, "rb")


def write_json(path: str, value: Any, indent: int = 1) -> None:
    write_atomic(path, (json.dumps(value, indent=indent, sort_keys=True) + "\n").encode("utf-8"))


# -- /proc ------------------------------------------------------------------------------------------
def proc_stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, pgid, sid, starttime) of a process, or None when it does not exist."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            raw = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    rest = raw[raw.rfind(")") + 2 :].split()
    # rest[0] is field 3 (state); pgid is field 5, session 6, starttime 22.
    return rest[0], int(rest[2]), int(rest[3]), int(rest[19])


def in_group(pid: int, pgid: int | None) -> bool:
    """The process is in that process group (a run's: its engine leads it), whatever its environment."""
    st = proc_stat(pid) if pgid else None
    return st is not None and st[1] == pgid


# -- the detached start -------------------------------------------------------------------------------
def detach(body: Callable[[int], int], close: list[IO[Any]]) -> bytes:
    """Run ``body(answer_fd)`` in a grandchild in its own session (a double fork), and return its answer.

    The child closes ``close`` (a lock the caller keeps holding, say), calls ``setsid`` and forks
    the grandchild, then exits at once, so the grandchild is nobody's child here and outlives this
    command (and the SSH channel that ran it). The grandchild writes its answer to the pipe
    ``answer_fd`` and closes it; ``body``'s return value is its exit status. This process waits for
    the child, then reads the pipe to its end: b"" when the grandchild died before answering.
    """
    r, w = os.pipe()
    child = os.fork()
    if child == 0:  # first child: new session, then fork the grandchild and leave
        try:
            os.close(r)
            for f in close:
                f.close()
            os.setsid()
            if os.fork() == 0:
                code = 1
                try:
                    code = body(w)
                finally:
                    os._exit(code)
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(child, 0)
    chunks = []
    while True:
        data = os.read(r, 65536)
        if not data:
            break
        chunks.append(data)
    os.close(r)
    return b"".join(chunks)


def answer(fd: int, value: dict[str, Any]) -> None:
    """The grandchild's answer through the pipe, which is closed after it (once: a second is ignored)."""
    try:
        os.write(fd, json.dumps(value).encode())
        os.close(fd)
    except OSError:
        pass


def last_json(output: bytes) -> dict[str, Any] | None:
    """A command's answer: the last line of its output that is a JSON object."""
    for line in reversed(output.decode("utf-8", "replace").splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None


def print_json(value: dict[str, Any]) -> None:
    """The command's one JSON answer, the last line of stdout."""
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


def run_command(argv: list[str], least: int, usage: str, commands: dict[str, Callable[[list[str]], dict[str, Any]]]) -> int:
    """A host script's ``main``: ``argv[1]`` names the command, which answers one JSON object.

    2 with ``usage`` on stderr when ``argv`` has fewer than ``least`` words, 2 for an unknown command.
    """
    if len(argv) < least:
        sys.stderr.write(usage + "\n")
        return 2
    command = commands.get(argv[1])
    if command is None:
        sys.stderr.write("unknown command %s\n" % argv[1])
        return 2
    print_json(command(argv))
    return 0
