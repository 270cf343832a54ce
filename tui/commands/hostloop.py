"""One event loop per command, closing every host connection it opened, with host and OS errors as one line."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from servelab.engines.errors import ServelabError
from servelab.engines.hosts.base import HostUnreachable
from servelab.engines.hosts.registry import close_all

T = TypeVar("T")


def run_on_hosts(start: Callable[[], Awaitable[T]]) -> T:
    """Run ``start()`` (called inside the loop) to completion; then close the hosts it opened."""

    async def main() -> T:
        try:
            return await start()
        except HostUnreachable as exc:
            raise ServelabError(str(exc)) from None
        except OSError as exc:
            where = f": {exc.filename}" if exc.filename else ""
            raise ServelabError(f"{exc.strerror or exc}{where}") from None
        finally:
            await close_all()

    return asyncio.run(main())
