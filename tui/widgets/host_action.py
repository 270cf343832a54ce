"""A screen's action on a host (stop, resume...): what a failure and a success tell the user."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from textual.widget import Widget

from servelab.engines.errors import ServelabError
from servelab.engines.hosts.base import HostUnreachable

#: What a host action may fail with: servelab's own refusal, a host out of reach, the OS.
HOST_ERRORS = (ServelabError, HostUnreachable, OSError)


async def host_action(
    widget: Widget,
    act: Callable[[], Awaitable[object]],
    failed: str,
    done: str,
    then: Callable[[], Awaitable[None]],
    error_timeout: float = 8,
) -> None:
    """``act()``; on a host error a notification titled ``failed``, else ``done`` and ``then()`` (a reload)."""
    try:
        await act()
    except HOST_ERRORS as exc:
        widget.notify(str(exc), title=failed, severity="error", timeout=error_timeout)
        return
    widget.notify(done, timeout=4)
    await then()
