"""A campaign report's three charts as typed series, and those charts written as SVG and PNG files.

The series are computed here, once, from the report's rows: the dashboard (textual-plotext) and
the files draw exactly these numbers and compute nothing. The charts the issue asks for:

- ``speedup``: speedup over the paired baseline against K, one series per engine, method and
  concurrency, each point with its band (the report's speedup band);
- ``acceptance``: per-position acceptance rate against the draft position (1..K), one series per
  measured speculative point (K, and the concurrency when there is more than one);
- ``throughput``: output tok/s against probe concurrency, one series per engine, method and K
  (the baseline included), each point with its 1.4826 x MAD band.

Matplotlib (Agg backend, no display) is imported only by :func:`write_plots`, so reading the
series costs nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from servelab.engines.campaign.report import CampaignReport, PointRow
from servelab.engines.errors import ServelabError
from servelab.engines.runs.state import CampaignState

CHARTS = ("speedup", "acceptance", "throughput")
FILE_FORMATS = ("svg", "png")


@dataclass(frozen=True)
class PlotPoint:
    """One measured point of a series; ``band`` is the ± half-width (None when not measured)."""

    x: float
    y: float
    band: float | None
    point: str  # the campaign point it comes from


@dataclass(frozen=True)
class Series:
    label: str
    points: tuple[PlotPoint, ...]


@dataclass(frozen=True)
class Chart:
    key: str  # one of CHARTS; also the file's stem
    title: str
    x_label: str
    y_label: str
    series: tuple[Series, ...]
    reference_y: float | None = None  # a horizontal guide (1.0 = no speedup)
    y_range: tuple[float, float] | None = None  # fixed axis (rates are 0..1), else fitted to the data

    @property
    def empty(self) -> bool:
        return not any(s.points for s in self.series)


@dataclass(frozen=True)
class CampaignPlots:
    campaign: str
    speedup: Chart
    acceptance: Chart
    throughput: Chart

    @property
    def charts(self) -> tuple[Chart, Chart, Chart]:
        return (self.speedup, self.acceptance, self.throughput)

    def to_json(self) -> dict[str, Any]:
        return {c.key: asdict(c) for c in self.charts}


def _spec(r: PointRow) -> str:
    return f"{r.engine} {r.method}" if r.method else f"{r.engine} baseline"


def _group(rows: Iterable[PointRow], key: Any) -> dict[str, list[PointRow]]:
    out: dict[str, list[PointRow]] = {}
    for r in rows:
        out.setdefault(key(r), []).append(r)
    return out


def _series(groups: dict[str, list[PointRow]], x: Any, y: Any, band: Any) -> tuple[Series, ...]:
    built = []
    for label, rows in groups.items():
        pts = sorted((PlotPoint(float(x(r)), float(y(r)), band(r), r.point) for r in rows), key=lambda p: p.x)
        built.append(Series(label, tuple(pts)))
    return tuple(built)


def plot_series(report: CampaignReport) -> CampaignPlots:
    """The three charts of a report: only points with the figure measured appear (never a 0 for absent)."""
    done = [r for r in report.rows if r.status == CampaignState.DONE]
    many_c = len({r.concurrency for r in done}) > 1
    sped = [r for r in done if r.k is not None and r.speedup is not None]
    speedup = Chart(
        "speedup", "Speedup over baseline against K", "K (tokens drafted per step)", "speedup (x)",
        _series(_group(sped, lambda r: f"{_spec(r)} c={r.concurrency}"), lambda r: r.k, lambda r: r.speedup, lambda r: r.speedup_band),
        reference_y=1.0,
    )
    acc_rows = [r for r in done if r.k is not None and r.per_position]
    acc_series = tuple(
        Series(
            f"{_spec(r)} K={r.k}" + (f" c={r.concurrency}" if many_c else ""),
            tuple(PlotPoint(float(i + 1), float(rate), None, r.point) for i, rate in enumerate(r.per_position)),
        )
        for r in sorted(acc_rows, key=lambda r: (r.engine, r.method or "", r.k or 0, r.concurrency or 0))
    )
    acceptance = Chart("acceptance", "Acceptance per draft position", "draft position", "acceptance rate", acc_series, y_range=(0.0, 1.0))
    tps = [r for r in done if r.output_tps is not None and r.concurrency is not None]
    throughput = Chart(
        "throughput", "Output throughput against concurrency", "probe concurrency", "output tok/s",
        _series(_group(tps, lambda r: _spec(r) + (f" K={r.k}" if r.k is not None else "")), lambda r: r.concurrency, lambda r: r.output_tps, lambda r: r.output_tps_band),
    )
    return CampaignPlots(report.campaign, speedup, acceptance, throughput)


def write_plots(plots: CampaignPlots, folder: Path) -> list[Path]:
    """Each chart as ``<folder>/<chart>.svg`` and ``.png`` (text kept as SVG text); the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ServelabError(f"cannot write plots to {folder}: {exc.strerror or exc}") from None
    written: list[Path] = []
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "servelab"}):
        for chart in plots.charts:
            fig, ax = plt.subplots(figsize=(7.0, 4.2), dpi=100)
            try:
                for s in chart.series:
                    xs = [p.x for p in s.points]
                    ys = [p.y for p in s.points]
                    errs = [p.band or 0.0 for p in s.points]
                    if any(p.band is not None for p in s.points):
                        ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=4, label=s.label)
                    else:
                        ax.plot(xs, ys, marker="o", label=s.label)
                if chart.reference_y is not None and not chart.empty:
                    ax.axhline(chart.reference_y, color="grey", linestyle=":", linewidth=1)
                if chart.empty:
                    ax.text(0.5, 0.5, "no measured points yet", ha="center", va="center", transform=ax.transAxes)
                else:
                    ax.legend(fontsize="small")
                xs_all = sorted({p.x for s in chart.series for p in s.points})
                if xs_all and all(x == int(x) for x in xs_all):
                    ax.set_xticks(xs_all)
                if chart.y_range is not None:
                    ax.set_ylim(chart.y_range[0], chart.y_range[1] + 0.02)
                ax.set_title(f"{plots.campaign}: {chart.title}")
                ax.set_xlabel(chart.x_label)
                ax.set_ylabel(chart.y_label)
                ax.grid(True, alpha=0.3)
                fig.tight_layout()
                for ext in FILE_FORMATS:
                    path = folder / f"{chart.key}.{ext}"
                    try:
                        fig.savefig(path, format=ext, metadata={"Date": None} if ext == "svg" else None)
                    except OSError as exc:
                        raise ServelabError(f"cannot write {path}: {exc.strerror or exc}") from None
                    written.append(path)
            finally:
                plt.close(fig)
    return written
