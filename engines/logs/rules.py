"""The grammar compiled into rules: what a line whose message starts with a needle means.

A :class:`~servelab.engines.logs.grammar.LogGrammar` (an adapter's data) becomes a flat list of
:class:`Rule`, each with its kind (a stage event, a progress bar, ready, shutdown, fatal, figures,
a setting, a notable warning, an answered request, the server up) and its compiled regex.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from servelab.engines.logs.grammar import STAGES, LogGrammar

__all__ = ["LATE", "NOTABLE_ANYWHERE", "SERVED_NEEDLE", "STAGE_CONTEXT", "Rule", "compile_rules", "to_number"]

#: The kinds of rule.
STAGE, BAR, READY, SHUTDOWN, FATAL, METRIC, SETTING, WARN, SERVED, UP = range(10)
#: Rules read one line at a time only until the run is up.
LATE = (SERVED, METRIC)

#: An answered request in uvicorn's access log (both engines serve through uvicorn): the server was up.
#: Read only until the run is known to be ready (then dropped from the scan: access lines are many).
SERVED_NEEDLE = "INFO:     "
SERVED_RX = r' - "POST [^"]*" 2\d\d'
#: Lines worth a hint when nothing else explains a failure, wherever they are in the line: NCCL's own
#: warnings ("NCCL WARN socketStartConnect: Connect to ... failed") and PyTorch's barrier report that
#: names the rank that failed first.
NOTABLE_ANYWHERE = ("NCCL WARN", "monitoredBarrier")
#: How a hint reads a failed stage (the frames say where an excerpt's traceback failed).
STAGE_CONTEXT = {
    "config": "during distributed set-up",
    "weights": "during weight loading",
    "drafter": "while loading the drafter",
    "compile": "during torch.compile",
    "kv_cache": "during memory profiling",
    "cuda_graphs": "during CUDA graph capture",
    "warmup": "during warm-up",
}


@dataclass
class Rule:
    needle: str
    kind: int
    stages: tuple[int, ...] = ()
    event: str = ""
    regex: re.Pattern[str] | None = None
    detail: str | None = None
    extra: Any = None
    anywhere: bool = False


def compile_rules(g: LogGrammar) -> list[Rule]:
    idx = {n: i for i, n in enumerate(STAGES)}
    rules: list[Rule] = []
    for r in g.stage_rules:
        rules.append(Rule(r.needle, STAGE, tuple(idx[s] for s in r.stages), r.event, re.compile(r.regex) if r.regex else None, r.detail))
    for b in g.bars:
        rules.append(Rule(b.needle, BAR, tuple(idx[s] for s in b.stages), regex=re.compile(b.regex)))
    for n in g.ready:
        rules.append(Rule(n, READY))
    for n in g.shutdown:
        rules.append(Rule(n, SHUTDOWN))
    for f in g.fatal:
        rules.append(Rule(f.needle, FATAL, regex=re.compile(f.regex) if f.regex else None, extra=f, anywhere=f.anywhere))
    for n in g.warnings:
        rules.append(Rule(n, WARN))
    for n in NOTABLE_ANYWHERE:
        rules.append(Rule(n, WARN, anywhere=True))
    rules.append(Rule(SERVED_NEEDLE, SERVED, regex=re.compile(SERVED_RX)))
    for n in g.up:
        rules.append(Rule(n, UP))
    for m in g.metrics:
        rules.append(Rule(m.needle, METRIC, regex=re.compile(m.regex), extra=m.kind))
    for name, rx in g.spec_settings.items():
        rules.append(Rule(rx[0], SETTING, regex=re.compile(rx[1]), extra=name))
    return rules


def to_number(s: str | None) -> float | None:
    """A printed figure (thousands commas allowed) as a float; None when missing, unparsable or NaN."""
    if s is None:
        return None
    try:
        v = float(s.replace(",", ""))
    except ValueError:
        return None
    return None if math.isnan(v) else v
