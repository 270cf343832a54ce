"""What "load" means, everywhere: seconds from start to ready.

- :func:`load_seconds`: start to ready by the log's own clock
  (:func:`~servelab.engines.logs.analysis.start_to_ready_s`, the gaps between stages included), from
  the live analysis or from what the probe kept; never the sum of the stage bars;
- :func:`load_text`: that figure as every view shows it.

The experiments list and its detail pane, ``servelab status``, compare and the campaign estimates
all read it from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servelab.engines.logs.analysis import Analysis, start_to_ready_s
from servelab.engines.probe.summary import ProbeSummary


def load_seconds(analysis: Analysis | None, probe: Mapping[str, Any] | None, started: str | None = None) -> float | None:
    """Seconds from start to ready (the gaps between stages and the time before the first log line
    included): the live analysis's, ``started`` being the record's ``started_local``; else the one
    the probe kept (``load_s``). Never the sum of the stage bars."""
    if analysis is not None and (seconds := start_to_ready_s(analysis.stages, started or None)) is not None:
        return seconds
    return ProbeSummary.of(probe).load_s if probe else None


def load_text(seconds: float | None) -> str:
    """Start-to-ready seconds as shown: ``40s``, ``12m`` from ten minutes on, "" when unknown."""
    if seconds is None:
        return ""
    return f"{seconds:.0f}s" if seconds < 600 else f"{seconds / 60:.0f}m"
