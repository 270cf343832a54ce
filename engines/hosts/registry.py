"""``open_host``: the one place a HostConfig becomes a Host, with one cached connection per host.

Connections belong to an event loop (asyncssh), so the cache is per running loop: the dashboard's
loop keeps one connection per host for its whole life; each CLI command (one ``asyncio.run``) gets
its own, closed by :func:`close_all`.
"""

from __future__ import annotations

import asyncio

from servelab.engines.hosts.base import Host
from servelab.engines.hosts.local import LocalHost
from servelab.engines.hosts.hostsfile import HostConfig

#: (id(loop), host name) -> (loop, config, host). Holding the loop keeps its id from being reused.
_cache: dict[tuple[int, str], tuple[object, HostConfig, Host]] = {}


def _loop() -> object:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def open_host(cfg: HostConfig) -> Host:
    """The Host for ``cfg``; the same object (and SSH connection) for every call in this loop."""
    loop = _loop()
    key = (id(loop), cfg.name)
    hit = _cache.get(key)
    if hit is not None and hit[1] == cfg:
        return hit[2]
    if cfg.is_local:
        host: Host = LocalHost(cfg)
    else:
        from servelab.engines.hosts.ssh import SshHost  # asyncssh (and cryptography) load only when needed

        host = SshHost(cfg)
    _cache[key] = (loop, cfg, host)
    return host


async def close_all() -> None:
    """Close every host opened in the running loop."""
    loop = id(_loop())
    for key in [k for k in _cache if k[0] == loop]:
        _, _, host = _cache.pop(key)
        await host.close()
