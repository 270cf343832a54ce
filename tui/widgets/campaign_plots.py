"""A campaign's three charts in the terminal, drawn with textual-plotext from the core's series.

``engines.campaign.plots.plot_series`` makes every number (which points, which series, their
labels, bands, axis ranges); this widget only hands them to plotext. The same ``Chart`` objects
are what ``servelab campaign report --plots DIR`` writes as SVG/PNG.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Container
from textual_plotext import PlotextPlot

from servelab.engines.campaign.plots import CHARTS, CampaignPlots, Chart


class ChartPlot(PlotextPlot):
    """One chart: a line per series (with its band as error bars when measured), a guide line, its axes."""

    DEFAULT_CSS = """
    ChartPlot { height: 16; min-width: 30; }
    """

    def __init__(self, key: str) -> None:
        super().__init__(id=f"campaign-plot-{key}", classes="campaign-plot")
        self.key = key
        self.chart: Chart | None = None

    def show(self, chart: Chart) -> None:
        self.chart = chart
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title(chart.title if not chart.empty else f"{chart.title}: no measured points yet")
        plt.xlabel(chart.x_label)
        plt.ylabel(chart.y_label)
        for s in chart.series:
            xs = [p.x for p in s.points]
            ys = [p.y for p in s.points]
            if not xs:
                continue
            plt.plot(xs, ys, label=s.label, marker="dot")
            if any(p.band is not None for p in s.points):
                plt.error(xs, ys, yerr=[p.band or 0.0 for p in s.points])
        if chart.reference_y is not None and not chart.empty:
            plt.hline(chart.reference_y)
        if chart.y_range is not None:
            plt.ylim(*chart.y_range)
        xs_all = sorted({p.x for s in chart.series for p in s.points})
        if xs_all:
            plt.xticks(xs_all, [f"{x:g}" for x in xs_all])
        self.refresh()


class CampaignCharts(Container):
    """Speedup against K, acceptance per position, throughput against concurrency (in that order)."""

    DEFAULT_CSS = """
    CampaignCharts { height: auto; layout: grid; grid-size: 3; grid-rows: 16; grid-gutter: 0 1; }
    """

    def compose(self) -> ComposeResult:
        for key in CHARTS:
            yield ChartPlot(key)

    def show(self, plots: CampaignPlots) -> None:
        by_key = {c.key: c for c in plots.charts}
        for plot in self.query(ChartPlot):
            plot.show(by_key[plot.key])
