"""What a screen may ask of the dashboard: the :class:`Face` protocol and :func:`servelab_app`.

Screens never import ``tui/app.py`` (it imports them): they reach the app through
:func:`servelab_app`, typed as :class:`Face`, and open other screens through
``tui/navigation.py``. ``ServelabApp`` satisfies :class:`Face` structurally (mypy checks it in
``tui/app.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    from textual.message_pump import MessagePump
    from textual.widget import Widget

    from servelab.engines.catalog.folder import Catalog
    from servelab.engines.logs.analysis import Analysis
    from servelab.engines.preflight.checks import Check
    from servelab.engines.probe.summary import ProbeSummary
    from servelab.engines.runs.manager import Runs
    from servelab.tui.widgets.toast_log import ToastLog


class Watching(Protocol):
    """The dashboard's run watcher, as screens read it: the latest analysis per run id."""

    @property
    def analyses(self) -> dict[str, Analysis]: ...


class Face(Protocol):
    """The dashboard as a screen sees it. ``readonly`` hides every action that starts or stops something."""

    folder: Path
    readonly: bool
    #: The catalog as last loaded by the experiments screen (None before the first load).
    catalog: Catalog | None
    #: Probes the app runs now (run id -> latest progress line), their results and failures.
    probing: dict[str, str]
    probe_results: dict[str, ProbeSummary]
    probe_errors: dict[str, str]
    #: The preflight checks of each run launched from this dashboard (none: launched without).
    preflights: dict[str, list[Check]]
    #: The toasts this dashboard has shown, to read again.
    toasts: ToastLog

    @property
    def watcher(self) -> Watching | None: ...

    def runs(self) -> Runs:
        """The run lifecycle for the folder as last loaded (loads it on first use)."""
        ...

    def settle_heap(self) -> None:
        """A screen is open and drawn: freeze what is alive now."""
        ...

    def runs_changed(self, run_id: str | None = None) -> None:
        """A run's state or a host's runs changed: every open screen that shows runs reads them again."""
        ...

    def start_probe(self, run_id: str, *, only_if_new: bool = False) -> bool:
        """Start the probe of a live run (one at a time per run); False when one is running."""
        ...


def servelab_app(node: MessagePump) -> Face:
    """The dashboard ``node`` is mounted in, typed as :class:`Face`.

    Textual types ``node.app`` as a plain ``App``, so a screen reading ``readonly`` or calling
    ``runs()`` through it is not checked: a typo, or an attribute shadowing a method, fails only
    when the line runs. Screens reach the app through this instead.
    """
    return cast("Face", node.app)


def probe_of_app(node: MessagePump, run_id: str, probe: ProbeSummary | None) -> tuple[ProbeSummary | None, str | None]:
    """A run screen's probe: ``probe`` (stored results) else the app's results for ``run_id``, and
    the app's probe in progress (its latest line, else ``failed: ...``, else None)."""
    app = servelab_app(node)
    if probe is None:
        probe = app.probe_results.get(run_id)
    progress = app.probing.get(run_id)
    if progress is None and run_id in app.probe_errors:
        progress = f"failed: {app.probe_errors[run_id]}"
    return probe, progress


def request_probe(widget: Widget, run_id: str) -> bool:
    """A run screen's ``P``: start the app's probe of ``run_id`` (saying so when one already runs);
    False in read-only mode, where nothing is done."""
    app = servelab_app(widget)
    if app.readonly:
        return False
    if not app.start_probe(run_id):
        widget.notify("a probe of this run is already running", timeout=3)
    return True


def writable(node: MessagePump, action: str, writes: tuple[str, ...]) -> bool:
    """A screen's ``check_action``: False for ``action`` when it is one of ``writes`` (it starts or
    stops something) and the dashboard is read-only."""
    return not (action in writes and servelab_app(node).readonly)
