"""Rich renderables of a campaign's typed objects: its plan, its live state, its results.

Drawing only: the plan comes from ``engines.campaign.plan``, the state from
``engines.campaign.control.CampaignStatus`` (with ``listing.current_step``), the figures and the
recommendation from ``engines.campaign.report``. Nothing here decides a state or computes a figure.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from servelab.engines.campaign.control import CampaignStatus
from servelab.engines.campaign.diagnosis import headline
from servelab.engines.campaign.listing import CampaignEntry, CurrentStep
from servelab.engines.campaign.plan import estimate_text
from servelab.engines.campaign.report import CampaignReport, PointRow
from servelab.engines.catalog.loader import display_path
from servelab.engines.runs.state import CampaignState

CURRENT_MARK = "▶"


def state_text(state: CampaignState | str) -> Text:
    """A campaign, load or point state in its one style (``CampaignState.style``; unknown ones plain)."""
    return Text(state, style=CampaignState.parse(state).style)


def plan_renderable(entry: CampaignEntry) -> Group:
    """A campaign file's plan: each load with its engine flags and estimate, and its points; or its problems."""
    parts: list[RenderableType] = [Text.assemble((entry.name, "bold"), f"  {display_path(entry.path)}")]
    for problem in entry.problems:
        parts.append(Text(f"  {problem}", style="red"))
    p = entry.plan
    if p is None:
        return Group(*parts)
    parts.append(Text(f"{len(p.points)} points in {len(p.loads)} loads · estimated loading time {estimate_text(p.estimate_s)}"))
    names = {pt.name: pt for pt in p.points}
    for load in p.loads:
        spec = load.experiment.speculative
        k = f"{spec.method} K={spec.num_tokens}" if spec.method != "none" else "no speculation"
        placed = next((a for a in p.assignments if a.load == load.index), None)
        where = f"{placed.host or 'no host'} ({placed.reason})" if placed is not None else load.experiment.host
        parts.append(Text.assemble((f"load {load.index + 1}", "bold"), f": {load.experiment.engine} on {where}, {k} (load time {estimate_text(load.estimate_s)})"))
        if load.speculative_flags:
            parts.append(Text("  engine flags: " + " ".join(load.speculative_flags), style="cyan"))
        for name in load.points:
            pt = names[name]
            paired = "  · vs the baseline's point with the same probe settings" if pt.baseline_point else ""
            parts.append(Text.assemble(f"  - {pt.label}", (paired, "dim")))
    return Group(*parts)


def status_line(st: CampaignStatus) -> Text:
    counts = ", ".join(f"{n} {s}" for s, n in sorted(st.counts().items())) or "no points"
    where = f"the fleet {', '.join(st.hosts)}" if st.hosts else st.host
    line = Text.assemble(("campaign ", ""), (st.id, "bold"), f" on {where}: ", state_text(st.status), f" ({counts})")
    for host in st.down:
        line.append(f" · {host} dropped out", style="yellow")
    if st.waiting_for:
        line.append(f" · waiting for the GPU set, held by {st.waiting_for}", style="cyan")
    if st.status == CampaignState.INTERRUPTED:
        line.append(" · the supervisor is gone: u resumes", style="yellow")
    if st.error:
        line.append(f" · error: {st.error}", style="red")
    return line


def _f(x: float | None, fmt: str, suffix: str = "") -> str:
    return "" if x is None or x != x else format(x, fmt) + suffix


RESULT_COLUMNS = ("", "load", "point", "state", "accept", "len", "per position", "tok/s", "±", "TTFT ms", "TPOT ms", "load s", "speedup", "±x")
#: What a terminal narrower than ``WIDE_TABLE`` columns keeps (the point, its state, the headline figures).
COMPACT_COLUMNS = ("", "load", "point", "state", "accept", "len", "tok/s", "speedup")
WIDE_TABLE = 130


def points_table(st: CampaignStatus | None, report: CampaignReport | None, current: CurrentStep | None, width: int = WIDE_TABLE) -> Table:
    """Every point in run order: its live state (from the status) and its figures (from the report)."""
    columns = RESULT_COLUMNS if width >= WIDE_TABLE else COMPACT_COLUMNS
    if st is not None and st.hosts:  # a fleet campaign: each point's host, and where its load was moved from
        columns = (*columns[:4], "host", *columns[4:])
    table = Table(box=None, show_header=True, header_style="bold", padding=(0, 1), expand=False)
    for col in columns:
        if col == "point":  # the long one wraps; the figures keep their width
            table.add_column(col, min_width=24, max_width=44, overflow="fold")
        else:
            table.add_column(col, no_wrap=True, min_width=max(len(col), 1))
    rows: dict[str, PointRow] = {r.point: r for r in report.rows} if report is not None else {}
    order = [p.name for p in st.points] if st is not None else list(rows)
    states = {p.name: p for p in st.points} if st is not None else {}
    for name in order:
        row = rows.get(name)
        live = states.get(name)
        state = live.status if live is not None else (row.status if row is not None else CampaignState.PENDING)
        is_current = current is not None and current.point == name
        label = f"{row.engine} {row.label}" if row is not None else name
        load = live.load if live is not None else (row.load if row is not None else 0)
        cell: dict[str, Text | str] = {"": Text(CURRENT_MARK, style="bold yellow") if is_current else "", "load": str(load + 1), "point": label, "state": state_text(state)}
        if live is not None:
            cell["host"] = (live.host or "") + (f" (moved from {live.moved_from}: {live.moved_why})" if live.moved_from else "")
        if row is not None:
            cell |= {
                "accept": _f(row.acceptance_rate * 100.0 if row.acceptance_rate is not None else None, ".0f", "%"),
                "len": _f(row.acceptance_length, ".2f"),
                "per position": " ".join(f"{p:.2f}" for p in row.per_position),
                "tok/s": _f(row.output_tps, ".1f"),
                "±": _f(row.output_tps_band, ".1f"),
                "TTFT ms": _f(row.ttft_ms, ".0f"),
                "TPOT ms": _f(row.tpot_ms, ".1f"),
                "load s": _f(row.load_s, ".0f"),
                "speedup": _f(row.speedup, ".2f", "x"),
                "±x": _f(row.speedup_band, ".2f"),
            }
        table.add_row(*(cell.get(col, "") for col in columns), style="reverse" if is_current else None)
    return table


def reasons_text(st: CampaignStatus | None, report: CampaignReport | None) -> Text:
    """Why each point that did not finish did not: one line each, whole (they wrap under the table)."""
    rows: dict[str, PointRow] = {r.point: r for r in report.rows} if report is not None else {}
    live = {p.name: p for p in st.points} if st is not None else {}
    text = Text()
    for name in list(live) or list(rows):
        row, point = rows.get(name), live.get(name)
        state = point.status if point is not None else (row.status if row is not None else "")
        # the report's reason first: it adds the root cause the log analyzer found in a crashed load
        error = (row.error if row is not None else None) or (point.error if point is not None else None)
        if error and state != CampaignState.DONE:
            label = f"{row.engine} {row.label}" if row is not None else name
            text.append("\n" if text.plain else "")
            text.append(f"{state} {label}: ", style=CampaignState.parse(state).style or "bold")
            text.append(error)
    return text


def current_text(st: CampaignStatus | None, current: CurrentStep | None) -> Text:
    if st is None:
        return Text("reading the campaign's state…", style="dim")
    if current is None:
        return Text("")
    what = f"load {current.load + 1}" if current.load is not None else "the queue"
    point = f", point {current.point}" if current.point else ""
    return Text(f"now: {current.step} ({what}{point})", style="bold yellow")


def recommendation_text(report: CampaignReport | None) -> Text:
    """The report's recommendation, its per-batch-size K line(s) when concurrency was an axis, and each
    diagnosed point's top finding (``campaign.diagnosis.headline``, as ``campaign report`` prints it)."""
    if report is None or not report.recommendation:
        return Text("recommendation: none yet (it needs a measured speculative point and its baseline)", style="dim")
    text = Text.assemble(("recommendation: ", "bold"), report.recommendation)
    for table in report.batch_size_tables:
        text.append("\nper batch size: ")
        text.append(table.line(), style="cyan")
    for r in report.rows:
        top = headline(r.diagnosis)
        if top is not None:
            text.append(f"\ndiagnosis {r.engine} {r.label}: ", style="bold")
            text.append(f"{top.message} (next: {top.next})")
    return text
