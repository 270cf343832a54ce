"""How a screen opens another one: :func:`go` (or :func:`ask`) with a small typed target.

Screens never import each other: each names where it wants to go (``OpenRun(run_id)``,
``Confirm(question)``...) and the app, which imports every screen, fills the registry at start
(``tui/routes.py``: one factory per target type). A target's type parameter is what its screen
dismisses with, so a callback or :func:`ask` is typed by it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

if TYPE_CHECKING:
    from textual.message_pump import MessagePump
    from textual.screen import Screen

    from servelab.engines.catalog.folder import Catalog

R = TypeVar("R")
T = TypeVar("T", bound="Target[Any]")


class Target(Generic[R]):
    """Where to go; ``R`` is what the screen opened there dismisses with."""


@dataclass(frozen=True)
class OpenRun(Target[None]):
    """A run's screen: a multi-node run's (``group``: its group id, or any node's run id) shows every node."""

    run_id: str
    group: bool = False


@dataclass(frozen=True)
class OpenSingleRun(Target[None]):
    """One run's own screen, even when its id looks like a node's."""

    run_id: str


@dataclass(frozen=True)
class OpenPreflight(Target["str | None"]):
    """The preflight of one experiment; with ``launch`` it starts the run and dismisses with its id."""

    catalog: Catalog
    experiment: str
    launch: bool
    skip_preflight: bool = False


@dataclass(frozen=True)
class Confirm(Target[bool]):
    """A yes/no question before anything that stops or removes."""

    question: str
    detail: str = ""


@dataclass(frozen=True)
class OpenCompare(Target[None]):
    """The comparison of experiments (their latest probed runs) or of run ids (``baseline_run``: the run
    each other one's speedup is against, as ``--baseline-run`` chooses it)."""

    experiments: list[str] | None = None
    run_ids: list[str] | None = None
    baseline_run: str | None = None


@dataclass(frozen=True)
class OpenHistory(Target[None]):
    """One experiment's runs over time."""

    experiment: str


@dataclass(frozen=True)
class OpenToasts(Target[None]):
    """The notifications this dashboard has shown, to read again."""


@dataclass(frozen=True)
class OpenWhy(Target[None]):
    """The diagnosis of runs."""

    run_ids: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class OpenCampaign(Target[None]):
    """One campaign's screen."""

    campaign_id: str


@dataclass(frozen=True)
class OpenHostGpus(Target[None]):
    """The host view: every GPU of one host, its memory and holders, and the campaigns' GPU locks."""

    host: str


_SCREENS: dict[type[Target[Any]], Callable[[Any], Screen[Any]]] = {}


def register(kind: type[T], factory: Callable[[T], Screen[Any]]) -> None:
    """The screen opened for targets of ``kind`` (the app's routes, filled at start)."""
    _SCREENS[kind] = factory


def screen_for(target: Target[R]) -> Screen[R]:
    """The screen ``target`` opens."""
    factory = _SCREENS.get(type(target))
    if factory is None:
        raise LookupError(f"no screen is registered for {type(target).__name__} (the app fills the routes at start)")
    return cast("Screen[R]", factory(target))


def go(widget: MessagePump, target: Target[R], callback: Callable[[R | None], None] | None = None, *, replace: bool = False) -> None:
    """Open ``target``'s screen over ``widget``'s (``replace``: instead of the current screen).

    ``callback`` gets what the screen dismisses with, as Textual's ``push_screen`` gives it.
    """
    screen = screen_for(target)
    if replace:
        widget.app.switch_screen(screen)
    else:
        widget.app.push_screen(screen, callback)


async def ask(widget: MessagePump, target: Target[R]) -> R:
    """Open ``target``'s screen and wait for what it dismisses with (only inside a worker)."""
    return await widget.app.push_screen_wait(screen_for(target))
