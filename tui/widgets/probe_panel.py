"""Probe figures of a run, with the per-position acceptance drawn as bars."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from servelab.engines.verdict.compare import unstable_note
from servelab.engines.logs.analysis import SpecFigures
from servelab.engines.probe.summary import ProbeSummary


def _fmt(value: Any, spec: str, suffix: str = "") -> str:
    return f"{value:{spec}}{suffix}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def acceptance_bars(rates: list[float], width: int = 24) -> Table:
    """One bar per draft position: the fraction of drafts whose token at that position was accepted."""
    table = Table(box=None, show_header=False, padding=(0, 1))
    table.add_column(no_wrap=True)
    table.add_column(width=width)
    table.add_column(no_wrap=True, justify="right")
    for i, rate in enumerate(rates, start=1):
        rate = max(0.0, min(float(rate), 1.0))
        table.add_row(f"pos {i}", ProgressBar(total=1.0, completed=rate, width=width, complete_style="green"), f"{rate:.2f}")
    return table


def probe_renderable(probe: ProbeSummary) -> Group:
    head = Text.assemble(
        ("PROBE ", "bold"),
        f"output {_fmt(probe.output_throughput, '.1f', ' tok/s')}",
        f" · TTFT {_fmt(probe.median_ttft_ms, '.0f', ' ms')}",
        f" · TPOT {_fmt(probe.median_tpot_ms, '.1f', ' ms')}",
        f" · acceptance {_fmt(probe.acceptance_rate, '.1f', '%')}",
        f" · length {_fmt(probe.acceptance_length, '.2f')}",
    )
    parts: list[RenderableType] = [head]
    unstable = unstable_note(probe.unstable)
    if unstable:
        parts.append(Text(unstable, style="yellow"))
    rates = probe.per_position
    if rates:
        parts.append(acceptance_bars([r for r in rates if isinstance(r, (int, float))]))
    return Group(*parts)


def live_renderable(spec: SpecFigures) -> Group:
    """Speculative-decoding figures the engine logs while serving (before or without a probe)."""
    rate = spec.acceptance_rate
    head = Text.assemble(
        ("FROM THE LOG ", "bold"),
        f"acceptance {_fmt(rate * 100 if rate is not None else None, '.1f', '%')}",
        f" · length {_fmt(spec.mean_acceptance_length, '.2f')}",
    )
    per_position = list(spec.per_position)
    return Group(head, acceptance_bars(per_position)) if per_position else Group(head)


class ProbePanel(Static):
    """Hidden until the run has probe results."""

    def show(self, probe: ProbeSummary | None, progress: str | None = None, live: SpecFigures | None = None) -> None:
        parts: list[RenderableType] = []
        if probe:
            parts.append(probe_renderable(probe))
        elif progress:
            parts.append(Text(f"PROBE {progress}", style="bold cyan"))
        if not probe and live is not None and (live.acceptance_rate is not None or live.mean_acceptance_length is not None):
            parts.append(live_renderable(live))
        if not parts:
            self.remove_class("-shown")
            return
        self.add_class("-shown")
        self.update(Group(*parts))
