"""A preflight's checks as a table (the preflight screen), and as the run screen's collapsible
block: what the launch checked stays readable after the launch screen has closed."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.widgets import Collapsible, Static

from servelab.engines.preflight.checks import CHECK_NAMES, Check

#: How each finding severity is marked.
SEVERITY_MARKS: dict[str, tuple[str, str]] = {"error": ("✗", "bold red"), "warning": ("!", "yellow"), "info": ("i", "dim")}


def checks_table(checks: list[Check], running: bool) -> Table:
    table = Table(box=None, show_header=False, padding=(0, 1), expand=True)
    table.add_column(width=1)
    table.add_column(no_wrap=True)
    table.add_column(ratio=1)
    table.add_column(no_wrap=True, justify="right")
    done = {c.name for c in checks}
    for check in checks:
        if check.skipped:
            mark, style = "–", "dim"
        else:
            mark, style = ("✓", "bold green") if check.ok else ("✗", "bold red")
        table.add_row(Text(mark, style=style), Text(check.name, style=style), Text(check.detail, style="" if check.ok else "red"), f"{check.seconds:.1f}s")
        for f in check.findings:
            fmark, fstyle = SEVERITY_MARKS.get(f.severity, ("?", ""))
            table.add_row(Text(""), Text(f"  {fmark} {f.code}", style=fstyle), Text(f"{f.message} — fix: {f.fix}", style=fstyle), "")
    if running:
        for name in CHECK_NAMES:
            if name not in done:
                table.add_row(Text("·", style="dim"), Text(name, style="dim"), Text("…", style="dim"), "")
    return table


def block_title(checks: list[Check]) -> str:
    """The collapsed block's one line: how many checks passed, and what to look at."""
    if not checks:
        return "preflight: skipped (launched without it)"
    passed = sum(c.ok and not c.skipped for c in checks)
    notes = sum(len(c.findings) + len(c.warnings) for c in checks)
    skipped = sum(c.skipped for c in checks)
    extra = (f", {skipped} skipped" if skipped else "") + (f", {notes} to read" if notes else "")
    return f"preflight: {passed} of {len(checks)} checks passed{extra}"


def needs_reading(check: Check) -> bool:
    """A failure, a finding or a warning: what opens the run screen's block."""
    return bool(check.findings or check.warnings or not check.ok)


class PreflightBlock(Collapsible):
    """The launch's preflight on the run screen: collapsed to its title unless a check has
    something to read (a failure, a finding or a warning)."""

    def __init__(self, checks: list[Check], *, id: str | None = None) -> None:
        self.checks = checks
        notes = any(needs_reading(c) for c in checks)
        # What needs reading comes first, so the block's first rows on a small screen are the failures.
        shown = sorted(checks, key=lambda c: not needs_reading(c))
        body = Static(checks_table(shown, running=False) if checks else "")
        super().__init__(body, title=block_title(checks), collapsed=not notes, id=id)
