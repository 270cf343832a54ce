"""The startup stages as the log tells them: which ran, which runs, and the furthest one reached.

Engines print stages out of order (several processes, late reports from other ranks, a second bar
of the same stage): :class:`StageTracker` keeps the timeline monotonic, so a stage once passed is
done, a late report of an earlier one is a stage that happened, and the one running is the newest.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from servelab.engines.logs.grammar import STAGES, is_primary_process
from servelab.engines.logs.rules import BAR, Rule, to_number
from servelab.engines.logs.analysis import Progress, RootCause, Stage
from servelab.engines.runs.state import StageState

__all__ = ["StageTracker"]


class StageTracker:
    """The stages of one run (``STAGES`` order); ``furthest`` is the index of the furthest one started."""

    def __init__(self, *, rank_zero_only: bool = False) -> None:
        self.stages = [Stage(n) for n in STAGES]
        self.furthest = -1  # nothing started: the process printed nothing yet
        #: whose stage lines count: "" rank 0's; a rank's name while none of rank 0's was seen
        #: (one node of a multi-node run logs TP8-15 only); None: no stage line yet
        self._lead: str | None = "" if rank_zero_only else None

    def apply(self, r: Rule, process: str, msg: str, ts: str | None) -> int | None:
        """A stage or bar rule's line: moves the stages when the line is the leading rank's and its
        regex matches. Returns the stage a ``start`` event began (None otherwise)."""
        if not is_primary_process(process):
            # rank 0 draws the stages; a log with none of its stage lines follows the first rank that printed one
            if self._lead is None:
                self._lead = process
            if process != self._lead:
                return None
        elif self._lead != "":
            self._lead = ""  # rank 0 from now on
        m = r.regex.search(msg) if r.regex else None
        if r.regex is not None and m is None:
            return None
        if r.kind == BAR:
            assert m is not None
            self.bar(r.stages, m, ts)
            return None
        detail = None
        if r.detail:
            try:
                detail = r.detail.format(**(m.groupdict() if m else {}))
            except (KeyError, IndexError, ValueError):
                detail = None
        if r.event == "start":
            began = self.pick_start(r.stages)
            self.start(began, ts, detail)
            return began
        i = self.pick_running(r.stages)
        if r.event == "end":
            self.end(self.pick_start(r.stages) if i is None else i, ts, detail)
        elif i is None:
            i = self.pick_start(r.stages)
            self.start(i, ts, detail)
        elif detail:
            self.stages[i].detail = detail
        return None

    def pick_start(self, cands: tuple[int, ...]) -> int:
        for i in cands:
            if self.stages[i].status != StageState.DONE:
                return i
        return cands[-1]

    def pick_running(self, cands: tuple[int, ...]) -> int | None:
        for i in reversed(cands):
            if self.stages[i].status == StageState.RUNNING:
                return i
        return None

    def start(self, i: int, ts: str | None, detail: str | None) -> None:
        st = self.stages[i]
        if st.status == StageState.PENDING and i >= self.furthest:
            st.status = StageState.RUNNING
            st.started_at = ts
        elif st.status == StageState.PENDING:
            st.status = StageState.DONE  # reported late (another process, out of order): it has happened
            st.started_at = st.ended_at = ts
        elif st.status == StageState.DONE and i >= self.furthest and i < len(self.stages) - 1:
            # a second bar of the same stage (FULL after PIECEWISE, draft graphs); ready, once done, stays done
            st.status = StageState.RUNNING
            st.ended_at = None
        if detail:
            st.detail = detail
        if i > self.furthest:
            for j in range(i):
                sj = self.stages[j]
                if sj.status == StageState.RUNNING:
                    sj.status = StageState.DONE
                    sj.ended_at = ts
            self.furthest = i

    def end(self, i: int, ts: str | None, detail: str | None) -> None:
        st = self.stages[i]
        if st.status == StageState.RUNNING:
            st.status = StageState.DONE
            st.ended_at = ts
        elif st.status == StageState.PENDING and i >= self.furthest:
            self.start(i, None, None)  # its start was not in the log
            st.status = StageState.DONE
            st.ended_at = ts
        if detail:
            st.detail = detail

    def bar(self, cands: tuple[int, ...], m: re.Match[str], ts: str | None) -> None:
        i = self.pick_running(cands)
        if i is None:
            i = self.pick_start(cands)
        st = self.stages[i]
        if st.status != StageState.RUNNING or i < self.furthest:
            if st.status == StageState.DONE and i < self.furthest:
                return  # a late bar of an earlier stage (another rank): ignore
            self.start(i, ts, None)
        gd = m.groupdict()
        done, total = int(gd["n"]), int(gd["total"])
        rate = to_number(gd.get("rate"))
        if rate is not None and gd.get("unit") == "s/it":
            rate = 1.0 / rate if rate else None
        eta = (total - done) / rate if rate else None
        st.progress = Progress(done, total, rate, eta)

    def ready(self, ts: str | None) -> None:
        """The run is up: the last stage (``ready``) is done, every earlier one with it."""
        ready = len(STAGES) - 1
        self.start(ready, ts, None)
        self.stages[ready].status = StageState.DONE
        self.stages[ready].ended_at = ts

    def copy(self) -> list[Stage]:
        """The stages as they are now (copies: safe to keep while the tracker moves on)."""
        return [Stage(s.name, s.status, s.started_at, s.ended_at, s.progress, s.detail) for s in self.stages]

    def failed(self, stages: list[Stage], cause: RootCause | None, frame_stages: Sequence[tuple[str, str]]) -> Stage | None:
        """The stage of ``stages`` (a copy) a crash before ready failed in: the one running, or, when
        the log shows no stage (an excerpt that starts inside the traceback), the one the innermost
        recognised frame of the cause names (``frame_stages``: the grammar's (needle, stage))."""
        running = [s for s in stages if s.status == StageState.RUNNING]
        if self.furthest <= 0 and cause is not None and frame_stages:
            for line in reversed(cause.excerpt):
                for needle, name in frame_stages:
                    if needle in line:
                        for s in running:
                            s.status = StageState.DONE  # it ran (the process printed), and it is not where it failed
                        return stages[STAGES.index(name)]
        return running[-1] if running else None
