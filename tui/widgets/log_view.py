"""A Toolong-like log view: renders only the visible lines of a spooled log, read from disk.

:class:`LogView` is a Line-API ``ScrollView`` over a :class:`LineIndex`; :class:`LogPanel`
wraps it with the search box and a status line (follow state, "+N new lines", matches, modes).
Whoever owns the log appends bytes to the index (in a worker) and then calls
:meth:`LogPanel.lines_added` on the UI thread.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import ClassVar

from rich.cells import cell_len
from rich.control import strip_control_codes
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.containers import Vertical
from textual.css.query import NoMatches
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Input, Static

from servelab.engines.logs.lines import LineKind
from servelab.tui.widgets.line_index import LineIndex

_KIND_CLASS: dict[LineKind, str] = {
    LineKind.ERROR: "logview--error",
    LineKind.TRACEBACK: "logview--error",
    LineKind.WARNING: "logview--warning",
    LineKind.PROGRESS: "logview--progress",
}


#: Drawn lines kept (their visible columns). A few screens' worth, so a scroll by a line or a page redraws
#: mostly from it. Each entry also holds the strips Textual derives from it (crops, styles: about
#: 5 kB a line in all); 2,000 of them were 10-20 MB, and while a followed log grew they filled at
#: ~+12 MB per 100k lines, the whole of the dashboard's memory growth in bench/tui_follow.py.
STRIP_CACHE_LINES = 256


def compile_search(term: str) -> re.Pattern[str] | None:
    """Case-insensitive regex when the term is one, else the literal text; None for empty."""
    if not term:
        return None
    try:
        return re.compile(term, re.IGNORECASE)
    except re.error:
        return re.compile(re.escape(term), re.IGNORECASE)


class LogView(ScrollView, can_focus=True):
    """The lines themselves. Follows the end while ``follow`` is on; any scroll up pauses it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j,down", "scroll_down", "Down", show=False, id="log.down"),
        Binding("k,up", "scroll_up", "Up", show=False, id="log.up"),
        Binding("g,home", "top", "Top", show=False, id="log.top"),
        Binding("G,end", "bottom", "End", show=False, id="log.end"),
        Binding("pagedown,space", "page_down", "Page down", show=False, id="log.page-down"),
        Binding("pageup,b", "page_up", "Page up", show=False, id="log.page-up"),
    ]

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "logview--error",
        "logview--warning",
        "logview--progress",
        "logview--match",
        "logview--cursor",
    }

    DEFAULT_CSS = """
    LogView { background: $surface; }
    LogView > .logview--error { color: $text-error; background: $error-muted; }
    LogView > .logview--warning { color: $text-warning; }
    LogView > .logview--progress { color: $text-accent; }
    LogView > .logview--match { background: $warning; color: $background; text-style: bold; }
    LogView > .logview--cursor { background: $primary-muted; }
    """

    follow: reactive[bool] = reactive(True)
    wrap: reactive[bool] = reactive(False)

    class FollowChanged(Message):
        def __init__(self, follow: bool) -> None:
            super().__init__()
            self.follow = follow

    def __init__(self, index: LineIndex, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.index = index
        self.cursor_line: int | None = None
        self._auto_scrolling = False
        self._end_pending = False
        self._wrap_cache: tuple[tuple[object, ...], list[Strip]] | None = None
        #: Drawn lines (the visible columns), by (line, is cursor, style epoch, scroll x, width); bounded LRU.
        self._strips: LRUCache[tuple[int, bool, int, int, int], Strip] = LRUCache(STRIP_CACHE_LINES)
        self._style_epoch = 0
        self._search_seen: object = None
        self._frame_style: Style | None = None

    # -- data ------------------------------------------------------------------------------------
    def sync(self) -> None:
        """The index changed: resize, follow the end if following, repaint."""
        rows = self.index.row_count
        width = self.index.max_width if not self.wrap else self.scrollable_content_region.width
        height = rows + (max(self.size.height - 1, 0) if self.wrap else 0)
        self._set_virtual_size(Size(width, height))
        if self.follow:
            self._scroll_to_end()
        self.refresh()

    def _set_virtual_size(self, size: Size) -> None:
        """Grow the scrollable area; a screen layout only when a scrollbar appears or goes.

        ``virtual_size`` is a layout reactive: assigning it re-lays out the whole screen, which
        cost ~50-100 ms a time on the shared 2-core machine, several times a second while a log
        grows (bench/tui_follow.py). While both scrollbars stay as they are, the widget's place
        on screen does not change: update the value and the scrollbars, and repaint.
        """
        old = self.virtual_size
        if size == old:
            return
        view = self.size
        same_bars = (old.height > view.height) == (size.height > view.height) and (old.width > view.width) == (
            size.width > view.width
        )
        scroll_update = getattr(self, "_scroll_update", None)
        if same_bars and old.height > 0 and callable(scroll_update):
            self.set_reactive(LogView.virtual_size, size)
            scroll_update(size)
            self.refresh()
        else:
            self.virtual_size = size

    def _scroll_to_end(self) -> None:
        self._auto_scrolling = True
        if self.wrap:
            target = max(self.index.row_count - 1, 0)
        else:
            target = max(self.max_scroll_y, self.index.row_count - self.scrollable_content_region.height, 0)
        self.scroll_to(y=target, animate=False, immediate=True, force=True)
        self._auto_scrolling = False
        if not self._end_pending:
            self._end_pending = True
            self.call_after_refresh(self._settle_end)

    def _settle_end(self) -> None:
        """After layout (a scrollbar may have appeared): land exactly on the last row."""
        self._end_pending = False
        if self.follow and not self.wrap and self.scroll_offset.y != self.max_scroll_y:
            self._auto_scrolling = True
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True, force=True)
            self._auto_scrolling = False

    def notify_style(self) -> None:
        """Theme, search or folding changed: rendered lines must be redrawn."""
        self._style_epoch += 1
        self._strips.clear()

    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.notify_style())

    def on_resize(self) -> None:
        self._wrap_cache = None
        self.sync()

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        # A move up pauses following; not a clamp to the new end (rows folded away after the
        # ingest worker classified them shrink the log under the view).
        if not self._auto_scrolling and self.follow and new_value < old_value and new_value < self.max_scroll_y:
            self.follow = False

    def watch_follow(self, follow: bool) -> None:
        if follow:
            self._scroll_to_end()
            self.refresh()
        self.post_message(self.FollowChanged(follow))

    def watch_wrap(self) -> None:
        self._wrap_cache = None
        self.sync()

    # -- navigation -------------------------------------------------------------------------------
    def show_line(self, line: int) -> None:
        """Scroll so ``line`` is visible (a third from the top) and mark it; pauses following."""
        self.follow = False
        self.cursor_line = line
        row = self.index.row_of_line(line)
        self.scroll_to(y=max(row - self.scrollable_content_region.height // 3, 0), animate=False, immediate=True, force=True)
        self.refresh()

    def action_top(self) -> None:
        self.follow = False
        self.scroll_home(animate=False, immediate=True)

    def action_bottom(self) -> None:
        self.follow = True

    def action_scroll_up(self) -> None:
        self.follow = False
        self.scroll_relative(y=-1, animate=False, immediate=True)

    def action_scroll_down(self) -> None:
        self.scroll_relative(y=1, animate=False, immediate=True)

    def action_page_up(self) -> None:
        self.follow = False
        self.scroll_relative(y=-max(self.scrollable_content_region.height - 1, 1), animate=False, immediate=True)

    def action_page_down(self) -> None:
        self.scroll_relative(y=max(self.scrollable_content_region.height - 1, 1), animate=False, immediate=True)

    # -- rendering --------------------------------------------------------------------------------
    def _styled(self, line: int) -> Text:
        index = self.index
        text = Text(index.text(line), no_wrap=not self.wrap, end="")
        kind_class = _KIND_CLASS.get(index.kind(line))
        if kind_class:
            text.stylize(self.get_component_rich_style(kind_class, partial=True))
        if line == self.cursor_line:
            text.stylize(self.get_component_rich_style("logview--cursor", partial=True))
        if index.search is not None:
            text.highlight_regex(index.search, self.get_component_rich_style("logview--match", partial=True))
        return text

    def render_lines(self, crop: Region) -> list[Strip]:
        """A frame's lines, all in one base style looked up once.

        ``rich_style`` walks the styles of every ancestor (~0.15 ms a call here); per line it was
        about a sixth of the UI thread's busy time while a followed log redrew its every row.
        """
        self._frame_style = self.rich_style
        try:
            return super().render_lines(crop)
        finally:
            self._frame_style = None

    @property
    def _base_style(self) -> Style:
        return self._frame_style if self._frame_style is not None else self.rich_style

    def render_line(self, y: int) -> Strip:
        if self.index.search is not self._search_seen:
            self._search_seen = self.index.search
            self.notify_style()
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width
        base = self._base_style
        if self.wrap:
            strips = self._wrapped(scroll_y, width)
            return strips[y].extend_cell_length(width, base) if y < len(strips) else Strip.blank(width, base)
        row = scroll_y + y
        if row >= self.index.row_count:
            return Strip.blank(width, base)
        line = self.index.line_at_row(row)
        key = (line, line == self.cursor_line, self._style_epoch, scroll_x, width)
        strip = self._strips.get(key) if line < self.index.line_count else None
        if strip is None:
            strip = self._window_strip(line, scroll_x, width)
            if line < self.index.line_count:  # the unfinished tail changes: never cached
                self._strips[key] = strip
        return strip

    def _window_strip(self, line: int, scroll_x: int, width: int) -> Strip:
        """The part of a line the view shows (columns ``scroll_x ..`` , ``width`` cells), as one Strip.

        What ``_line_strip(line).crop_extend(..)`` draws, without keeping the full-width strip and
        its derived ones: each Strip carries seven caches, all objects the garbage collector walks
        in every full pass, and ``crop_extend`` of a strip already as wide as the view stores the
        strip in its own cache, a cycle only the collector frees. A plain line is sliced and
        padded as text: one segment, one Strip.
        """
        base = self._base_style
        index = self.index
        if index.search is None and line != self.cursor_line and index.kind(line) not in _KIND_CLASS:
            text = index.text(line)
            if text.isprintable() and text.isascii():  # one cell a character (see _line_strip)
                return Strip([Segment(text[scroll_x : scroll_x + width].ljust(width), base)], width)
        end = scroll_x + width
        return self._line_strip(line).extend_cell_length(end, base).crop(scroll_x, end)

    def _line_strip(self, line: int) -> Strip:
        """One line, full width, in the view's style.

        Following a growing log, nearly every row of a frame is a line not drawn before, and
        nearly all of them are plain (no kind colour, no cursor, no search): those are one
        segment, built directly (what :meth:`_rich_strip` gives, ~5x cheaper: less of the UI
        thread per frame, so a key finds it free sooner).
        """
        index = self.index
        if index.search is None and line != self.cursor_line and index.kind(line) not in _KIND_CLASS:
            text = index.text(line)
            if text.isprintable() and text.isascii():
                # one cell a character; rich's cell_len would keep each line in its 4,096-entry
                # cache (~1 MB of log text, besides the index's own text cache)
                return Strip([Segment(text, self._base_style)], len(text))
            text = strip_control_codes(text)
            return Strip([Segment(text, self._base_style)], cell_len(text))
        return self._rich_strip(line)

    def _rich_strip(self, line: int) -> Strip:
        """Any line through rich: kind colour, cursor, search highlights."""
        base = self._base_style
        text = self._styled(line)
        segments = [Segment(s.text, base + s.style if s.style else base) for s in text.render(self.app.console)]
        return Strip(segments, text.cell_len)

    def _wrapped(self, scroll_y: int, width: int) -> list[Strip]:
        """Rows of the viewport with long lines wrapped; bottom-anchored while following."""
        height = self.scrollable_content_region.height
        key = (scroll_y, width, height, self.index.version, self.follow, self.cursor_line)
        if self._wrap_cache is not None and self._wrap_cache[0] == key:
            return self._wrap_cache[1]
        console = self.app.console
        options = console.options.update_width(max(width, 1))
        rows = self.index.row_count

        def wrapped(row: int) -> list[Strip]:
            text = self._styled(self.index.line_at_row(row))
            lines = console.render_lines(text, options, style=self._base_style, pad=False)
            return [Strip(line) for line in lines] or [Strip.blank(width)]

        strips: list[Strip] = []
        if self.follow:
            row = rows - 1
            while row >= 0 and len(strips) < height:
                strips[:0] = wrapped(row)
                row -= 1
            strips = strips[-height:]
        else:
            row = scroll_y
            while row < rows and len(strips) < height:
                strips.extend(wrapped(row))
                row += 1
        self._wrap_cache = (key, strips)
        return strips


class LogPanel(Vertical):
    """LogView plus search box and status line; owns the log keys (search, follow, fold, ...)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "search", "Search", id="log.search"),
        Binding("n", "next_match", "Next", id="log.next-match"),
        Binding("N", "previous_match", "Prev", show=False, id="log.previous-match"),
        Binding("F", "toggle_filter", "Filter", id="log.filter"),
        Binding("f", "toggle_follow", "Follow", id="log.follow"),
        Binding("e", "first_error", "1st error", id="log.first-error"),
        Binding("w", "toggle_wrap", "Wrap", id="log.wrap"),
        Binding("z", "toggle_fold", "Noise", id="log.fold-noise"),
    ]

    DEFAULT_CSS = """
    LogPanel { height: 1fr; }
    LogPanel > LogView { height: 1fr; }
    LogPanel > #log-search { display: none; dock: bottom; }
    LogPanel.-searching > #log-search { display: block; }
    LogPanel > #log-status { height: 1; background: $panel; color: $text-muted; }
    LogPanel > #log-status.-paused { color: $text-warning; }
    """

    def __init__(self, index: LineIndex, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.index = index
        self.pending = 0
        self.match_count = 0
        #: Said in the status line (while only the log's end is shown, for one).
        self.note = ""

    def compose(self) -> ComposeResult:
        yield LogView(self.index, id="log-view")
        yield Static("", id="log-status")
        yield Input(placeholder="search (regex or text); Enter: find, Esc: cancel", id="log-search")

    @property
    def view(self) -> LogView:
        return self.query_one(LogView)

    def on_mount(self) -> None:
        self.view.sync()
        self._update_status()

    def set_index(self, index: LineIndex, note: str = "") -> None:
        """Show another log (the old one was truncated or replaced), following its end."""
        self.index = index
        self.note = note
        self.pending = 0
        self.match_count = 0
        view = self.view
        view.index = index
        view.cursor_line = None
        view._wrap_cache = None
        view.notify_style()
        view.follow = True
        view.sync()
        self._update_status()

    def swap_index(self, index: LineIndex, map_line: Callable[[int], int]) -> None:
        """Show ``index`` instead: the same log, more of it (the whole log after its end alone).

        The reader keeps their place: following stays on the end, a paused view stays on the same
        line and the cursor on its line (``map_line``: a line of the old index to the new one), and
        search, filter and folding carry over (applied in a worker: they scan the whole log).
        """
        old = self.index
        view = self.view
        top = None if view.follow else old.line_at_row(int(view.scroll_offset.y))
        self.index = index
        self.note = ""
        view.index = index
        view.cursor_line = map_line(view.cursor_line) if view.cursor_line is not None else None
        view._wrap_cache = None
        view.notify_style()
        view.sync()
        if top is not None:
            view.scroll_to(y=index.row_of_line(map_line(top)), animate=False, immediate=True, force=True)
        if old.search is not None or old.fold_noise != index.fold_noise:
            self._carry_modes(old.search, old.fold_noise, old.filter)
        self._update_status()

    @work(thread=True, exclusive=True, group="log-scan")
    def _carry_modes(self, search: re.Pattern[str] | None, fold: bool, filter_on: bool) -> None:
        index = self.index
        if index.fold_noise != fold:
            index.set_fold_noise(fold)
        if search is not None:
            self.match_count = index.set_search(search)
            index.set_filter(filter_on)
        self.app.call_from_thread(self._mode_done)

    def lines_added(self, rows: int) -> None:
        """Call on the UI thread after appending to the index."""
        try:
            view = self.view
        except NoMatches:  # not composed yet (a restarted log): on_mount syncs with the index then
            return
        if not view.follow and rows > 0:
            self.pending += rows
        if self.index.search is not None:
            self.match_count = len(self.index.matches)
        view.sync()
        self._update_status()

    def _update_status(self) -> None:
        try:
            view = self.view
            status = self.query_one("#log-status", Static)
        except NoMatches:  # being removed (the screen closed while an update was on its way)
            return
        index = self.index
        parts = ["following" if view.follow else "paused"]
        if not view.follow and self.pending:
            parts.append(f"+{self.pending} new lines (f: follow)")
        if index.search is not None:
            parts.append(f"/{index.search.pattern}/ {self.match_count} match{'es' if self.match_count != 1 else ''}")
        if index.filter and index.search is not None:
            parts.append("filter on")
        parts.append("noise folded" if index.fold_noise else "noise shown")
        if view.wrap:
            parts.append("wrap")
        parts.append(f"{index.line_count} lines")
        if self.note:
            parts.append(self.note)
        status.update(" · ".join(parts), layout=False)  # one fixed row: no relayout per chunk
        status.set_class(not view.follow and self.pending > 0, "-paused")

    @on(LogView.FollowChanged)
    def _follow_changed(self, event: LogView.FollowChanged) -> None:
        if event.follow:
            self.pending = 0
        self._update_status()

    # -- actions ----------------------------------------------------------------------------------
    def action_search(self) -> None:
        self.add_class("-searching")
        box = self.query_one("#log-search", Input)
        box.value = self.index.search.pattern if self.index.search is not None else ""
        box.focus()

    @on(Input.Submitted, "#log-search")
    def _search_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.remove_class("-searching")
        self.view.focus()
        self._apply_search(compile_search(event.value.strip()))

    def on_key(self, event: events.Key) -> None:
        if event.key == "escape" and self.has_class("-searching"):
            event.stop()
            self.remove_class("-searching")
            self.view.focus()

    @work(thread=True, exclusive=True, group="log-scan")
    def _apply_search(self, pattern: re.Pattern[str] | None) -> None:
        count = self.index.set_search(pattern)
        self.app.call_from_thread(self._search_done, count)

    def _search_done(self, count: int) -> None:
        self.match_count = count
        self.view.sync()
        self._update_status()
        if count:
            self.action_next_match()
        elif self.index.search is not None:
            self.app.notify(f"no match for {self.index.search.pattern!r}", severity="warning", timeout=3)

    def _jump(self, forward: bool) -> None:
        view = self.view
        if self.index.search is None:
            self.app.notify("no search: press / first", timeout=2)
            return
        if view.cursor_line is not None:
            here = view.cursor_line
        else:
            here = self.index.line_at_row(int(view.scroll_offset.y)) - 1
        line = self.index.next_match(here, forward)
        if line is None:
            self.app.notify("no match", severity="warning", timeout=2)
            return
        view.show_line(line)
        self._update_status()

    def action_next_match(self) -> None:
        self._jump(True)

    def action_previous_match(self) -> None:
        self._jump(False)

    def action_toggle_follow(self) -> None:
        self.view.follow = not self.view.follow

    def action_first_error(self) -> None:
        line = self.index.first_error()
        if line is None:
            self.app.notify("no error in this log", timeout=2)
            return
        if self.index.row_of_line(line) >= self.index.row_count or self.index.line_at_row(self.index.row_of_line(line)) != line:
            self.app.notify("the first error is hidden by the filter", severity="warning", timeout=3)
        self.view.show_line(line)
        self._update_status()

    def action_toggle_wrap(self) -> None:
        self.view.wrap = not self.view.wrap
        self._update_status()

    def action_toggle_fold(self) -> None:
        self._set_mode(fold=not self.index.fold_noise)

    def action_toggle_filter(self) -> None:
        if self.index.search is None:
            self.app.notify("filter shows lines matching the search: press / first", timeout=3)
            return
        self._set_mode(filter_on=not self.index.filter)

    @work(thread=True, exclusive=True, group="log-scan")
    def _set_mode(self, fold: bool | None = None, filter_on: bool | None = None) -> None:
        if fold is not None:
            self.index.set_fold_noise(fold)
        if filter_on is not None:
            self.index.set_filter(filter_on)
        self.app.call_from_thread(self._mode_done)

    def _mode_done(self) -> None:
        view = self.view
        view.sync()
        if not view.follow and view.cursor_line is not None:
            view.show_line(view.cursor_line)
        self._update_status()
