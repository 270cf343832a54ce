"""What the two live run screens share (one run: ``screens/run.py``; a multi-node group: ``screens/nodes_run.py``;
here beside ``list_screen.py``, since a screen module imports no other):
the runs they act through, their local log spools, and the one rule for which actions they offer
(a read-only dashboard starts and stops nothing; stop is offered while there is something to stop)."""

from __future__ import annotations

from pathlib import Path

from textual.screen import Screen

from servelab.engines.runs.manager import Runs
from servelab.tui.face import servelab_app, writable
from servelab.tui.widgets.spool import prune_spool, spool_path

#: Actions of a run screen that start or stop something on the host.
WRITES = ("stop", "probe")


class LiveRunScreen(Screen[None]):
    """A run screen: one run id, live."""

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id

    @property
    def runs(self) -> Runs:
        return servelab_app(self).runs()

    def fresh_spool(self, suffix: str, run_id: str | None = None) -> Path:
        """An empty local copy of a log beside the run's (old copies not opened for days go)."""
        path = spool_path(run_id or self.run_id).with_suffix(suffix)
        path.parent.mkdir(parents=True, exist_ok=True)
        prune_spool(path.parent)
        path.write_bytes(b"")
        return path

    def stop_offered(self) -> bool:
        """Whether there is something left to stop."""
        return True

    def offers(self, action: str) -> bool | None:
        """The screen's own actions (True: offered, False: hidden, None: shown greyed)."""
        return True

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if not writable(self, action, WRITES):
            return False
        if action == "stop" and not self.stop_offered():
            return None
        return self.offers(action)
