"""The pinned root-cause panel: the exception that failed the run, where, and what to try."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text
from textual.widgets import Static

from servelab.engines.logs.analysis import RootCause


def root_cause_renderable(cause: RootCause, hint: str | None, *, excerpt_lines: int = 4, message_chars: int = 180) -> Group:
    """Exception and message first, then the hint, then where, then a few lines of the traceback."""
    message = " ".join(cause.message.split())
    if len(message) > message_chars:
        message = message[: message_chars - 1] + "…"
    title = Text("ROOT CAUSE", style="bold reverse red")
    head = Text.assemble(title, " ", ((cause.exception or "unfinished traceback") + ": ", "bold"), message)
    parts: list[RenderableType] = [head]
    if hint:
        parts.append(Text.assemble(("HINT", "bold reverse yellow"), " ", (hint, "bold")))
    if cause.evidence:
        parts.append(Text(f"evidence: {cause.evidence}", style="italic", overflow="ellipsis", no_wrap=True))
    origin = [p for p in (cause.process and f"in {cause.process}", cause.where and f"at {cause.where}", cause.line is not None and f"log line {cause.line}") if p]
    if origin:
        parts.append(Text(" · ".join(str(p) for p in origin), style="dim", overflow="ellipsis", no_wrap=True))
    for line in cause.excerpt[-excerpt_lines:]:
        parts.append(Text("  " + line, style="red", overflow="ellipsis", no_wrap=True))
    return Group(*parts)


class RootCausePanel(Static):
    """Hidden until the run has a root cause; then pinned above the log."""

    def show(self, cause: RootCause | None, hint: str | None) -> None:
        if cause is None and not hint:
            self.remove_class("-shown")
            return
        self.add_class("-shown")
        if cause is None:
            self.update(Text.assemble(("HINT ", "bold reverse yellow"), " ", (hint or "", "bold")))
        else:
            self.update(root_cause_renderable(cause, hint))
