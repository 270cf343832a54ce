"""The served target's fingerprint, computed on its host beside the weights (``helpers/weightprint.py``)
and kept there in a cache file by each file's size, mtime and inode: a repeat reads nothing."""

from __future__ import annotations

from servelab.engines.errors import ServelabError
from servelab.engines.helpers import run_helper
from servelab.engines.hosts.base import Host, HostUnreachable, private_dir
from servelab.engines.adapters.exchange import TargetIdentity

HELPER = "weightprint.py"
CACHE_FILE = "weightprint-cache.json"


def cache_path(host: Host) -> str:
    """In this user's folder of the workdir (made when a helper was uploaded there)."""
    return f"{private_dir(host.config)}/{CACHE_FILE}"


async def target_identity(host: Host, python: str, folder: str, timeout: float = 120.0) -> TargetIdentity | None:
    """The folder's fingerprint, or None when it cannot be read as a safetensors checkpoint (never an error:
    a run or a diagnosis goes on without it)."""
    try:
        answer = await run_helper(host, python, HELPER, request={"folder": folder, "cache": cache_path(host)}, timeout=timeout)
    except (ServelabError, HostUnreachable, OSError):
        return None
    return TargetIdentity.of(answer)
