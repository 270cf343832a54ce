"""Where each navigation target leads: the app fills ``tui/navigation.py``'s registry from here.

This is the one module that imports the screens to open them; the screens themselves name only a
target (``go(self, OpenRun(run_id))``), never another screen.
"""

from __future__ import annotations

from textual.screen import Screen

from servelab.engines.nodes.resolve import group_id_of
from servelab.tui import navigation as nav
from servelab.tui.screens.campaign import CampaignScreen
from servelab.tui.screens.compare import CompareScreen
from servelab.tui.screens.confirm import ConfirmScreen
from servelab.tui.screens.gpus import HostGpusScreen
from servelab.tui.screens.history import HistoryScreen
from servelab.tui.screens.nodes_run import NodesRunScreen
from servelab.tui.screens.preflight import PreflightScreen
from servelab.tui.screens.run import RunScreen
from servelab.tui.screens.toasts import ToastsScreen
from servelab.tui.screens.why import WhyScreen


def run_screen_for(run_id: str, *, group: bool = False) -> Screen[None]:
    """The screen that shows ``run_id``: a multi-node run's (``group``: its group id, or any node's
    run id) shows every node."""
    if group or group_id_of(run_id) is not None:
        return NodesRunScreen(run_id)
    return RunScreen(run_id)


def install() -> None:
    """Register every target's screen (idempotent; the app calls it when it is made)."""
    nav.register(nav.OpenRun, lambda t: run_screen_for(t.run_id, group=t.group))
    nav.register(nav.OpenSingleRun, lambda t: RunScreen(t.run_id))
    nav.register(nav.OpenPreflight, lambda t: PreflightScreen(t.catalog, t.experiment, launch=t.launch, skip_preflight=t.skip_preflight))
    nav.register(nav.Confirm, lambda t: ConfirmScreen(t.question, t.detail))
    nav.register(nav.OpenCompare, lambda t: CompareScreen(t.experiments, t.run_ids, t.baseline_run))
    nav.register(nav.OpenHistory, lambda t: HistoryScreen(t.experiment))
    nav.register(nav.OpenToasts, lambda t: ToastsScreen())
    nav.register(nav.OpenWhy, lambda t: WhyScreen(t.run_ids))
    nav.register(nav.OpenCampaign, lambda t: CampaignScreen(t.campaign_id))
    nav.register(nav.OpenHostGpus, lambda t: HostGpusScreen(t.host))
