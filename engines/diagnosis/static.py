"""The drafter checks (``servelab drafter``) run beside the suite, so a dead position 1 is named
a configuration fault when the checks find one, and an untrained drafter when they find none."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servelab.engines.adapters.base import get_adapter
from servelab.engines.diagnosis.model import StaticCheck
from servelab.engines.drafter.facts import FactsError
from servelab.engines.drafter.run import check_drafter
from servelab.engines.errors import ServelabError
from servelab.engines.hosts.base import HostUnreachable

if TYPE_CHECKING:
    from servelab.engines.catalog.experiment import Experiment
    from servelab.engines.hosts.base import Host

#: Methods whose drafter is a checkpoint the checks can read.
CHECKED_METHODS = frozenset({"eagle", "eagle3", "draft_model", "mtp"})


async def drafter_checks(host: Host, python: str, exp: Experiment, target_path: str, draft_path: str | None) -> tuple[StaticCheck, ...] | None:
    """The checks' findings, or None when they do not apply or cannot run (the diagnosis says so)."""
    if exp.speculative.method not in CHECKED_METHODS or not draft_path:
        return None
    try:
        report = await check_drafter(host, get_adapter(exp.engine), python=python, method=exp.speculative.method,
                                     draft_path=draft_path, target_path=target_path)
    except (FactsError, ServelabError, HostUnreachable, OSError):
        return None
    return tuple(StaticCheck(f.code, f.severity, f.message, f.fix) for f in report.findings)
