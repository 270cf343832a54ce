"""The notifications this dashboard has shown, newest first (the palette's "Notifications", anywhere): a toast that went by
while you looked elsewhere can be read again."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Header, Static

from servelab.tui.face import servelab_app
from servelab.tui.widgets.key_footer import KeyFooter

STYLE = {"error": "bold red", "warning": "yellow", "information": ""}


class ToastsScreen(Screen[None]):
    """Every toast shown so far (the app's :class:`~servelab.tui.widgets.toast_log.ToastLog`)."""

    BINDINGS: ClassVar[list[BindingType]] = []

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll():
            yield Static("", id="toasts-body")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.title = "notifications"
        toasts = servelab_app(self).toasts.newest_first()
        self.sub_title = f"{len(toasts)} shown by this dashboard"
        body = Text()
        if not toasts:
            body.append("no notification yet", style="dim")
        for t in toasts:
            body.append(f"{t.at}  ", style="dim")
            if t.title:
                body.append(f"{t.title}: ", style="bold " + STYLE.get(t.severity, ""))
            body.append(t.message + "\n", style=STYLE.get(t.severity, ""))
        self.query_one("#toasts-body", Static).update(body)
