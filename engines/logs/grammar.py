"""The shape of an engine's log grammar, and the line-header parsers grammars are built from.

The data (which message means which stage, which lines are wrappers, how a process is named) lives
in each engine's adapter file (``engines/adapters/vllm.py``, ``engines/adapters/sglang.py``) as a :class:`LogGrammar`;
the machinery that applies it lives in ``engines/logs``. Every rule carries a plain ``needle``: the
start of the message (after the process prefix and the logger header), at least 6 characters long.
The analyzer finds candidate rules with one dict lookup per line and pays for a regex only when a
needle matched. A few rules (``FatalRule.anywhere``) may match anywhere in a line.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple

__all__ = [
    "STAGES",
    "STAGE_LABELS",
    "Header",
    "StageRule",
    "BarRule",
    "Wrapper",
    "FatalRule",
    "Evidence",
    "UVICORN_SERVED",
    "UVICORN_ANSWERED",
    "MetricRule",
    "LogGrammar",
    "header_parser",
    "parse_header",
    "is_primary_process",
]

#: Stable stage ids, in startup order (the TUI shows one bar per id).
STAGES: tuple[str, ...] = (
    "process",
    "config",
    "weights",
    "drafter",
    "compile",
    "kv_cache",
    "cuda_graphs",
    "warmup",
    "ready",
)

#: What the operator reads for each stage id (the run screen's bar labels, ``servelab status``).
STAGE_LABELS: dict[str, str] = {
    "process": "process",
    "config": "config",
    "weights": "weights",
    "drafter": "drafter",
    "compile": "compile",
    "kv_cache": "KV cache",
    "cuda_graphs": "CUDA graphs",
    "warmup": "warm-up",
    "ready": "ready",
}


class Header(NamedTuple):
    """One line split into its parts. ``msg`` keeps the message's own indentation.

    A NamedTuple: built for every line the analyzer reads, and cheap to build.
    """

    process: str  # "" when the line carries no process prefix / rank tag
    level: str  # "" when not printed (SGLang, raw prints, tracebacks)
    ts: str  # "" when absent
    msg: str
    #: The logger's call site (``core.py:712``): one logger record keeps it on every line.
    tag: str = ""


@dataclass(frozen=True)
class StageRule:
    """A message that moves a stage: ``event`` is ``start``, ``end`` or ``detail``.

    ``stages`` lists candidate stages: a start goes to the first one not yet done, an end or a
    detail to the last one running (vLLM prints "Loading weights took" for target and drafter).
    ``detail`` is a ``str.format`` template over the regex's named groups.
    """

    needle: str
    stages: tuple[str, ...]
    event: str = "start"
    regex: str | None = None
    detail: str | None = None


@dataclass(frozen=True)
class BarRule:
    """A tqdm bar: ``regex`` must have named groups ``n`` and ``total``; ``rate``/``unit`` optional."""

    needle: str
    stages: tuple[str, ...]
    regex: str


@dataclass(frozen=True)
class Wrapper:
    """An error line that only wraps the real one. ``harvest`` pulls the inner text (group ``inner``).

    ``context`` says where the wrapped failure happened ("during CUDA graph capture"): the harvested
    inner text loses it, and the hint needs it (an OOM while capturing graphs has its own remedy).
    """

    needle: str
    harvest: str | None = None
    context: str = ""
    #: Raised only once the engine served (vLLM's EngineDeadError): the run had been up.
    serving: bool = False


@dataclass(frozen=True)
class FatalRule:
    """A line that means the run failed, even with no traceback after it.

    ``regex`` with a ``message`` group (and optionally ``exception``) turns the line itself into a
    root-cause candidate (pydantic's ``Value error, ...``); without it the line only marks which
    process failed and where.
    """

    needle: str
    regex: str | None = None
    exception: str = ""
    #: The line only wraps the real failure (launcher's "Received sigquit"): never the root cause.
    wrapper: bool = False
    #: Match ``needle`` anywhere in the line, not only at the message start (keep these few).
    anywhere: bool = False
    #: Fatal evidence without a traceback (a device assertion, NCCL's watchdog, a signal exit): its
    #: rank (0 strongest). The line is a root-cause candidate below any traceback whose exception
    #: line is in the window and above a traceback cut before it; among such lines the strongest
    #: wins, then the earliest. ``None``: an ordinary fatal rule.
    rank: int | None = None
    #: Evidence that names a cause but does not by itself mean the run failed (the caching
    #: allocator's OOM warning: it may recover): it counts only when something else was fatal.
    weak: bool = False
    #: A death that names no child ("Received sigquit from a child process"): a traceback of the
    #: engine's own code, even cut before its exception line, is that child's and says more.
    unnamed: bool = False
    #: Fatal evidence whose next line may say what it was (C++'s ``  what():  CUDA error: ...``
    #: after ``terminate called after throwing``): the text after ``then`` on the very next line
    #: completes the message.
    then: str = ""
    #: The line counts only at these log levels (empty: any); an exception's repr on an ERROR record.
    levels: tuple[str, ...] = ()
    #: The line means the HTTP server never came up (it could not bind): a ready line before it
    #: was premature, unless the log shows the server serving.
    startup: bool = False
    #: The line says the start-up's warm-up failed (SGLang's "Initialization failed. warmup error"):
    #: the engine's batches before it (the grammar's ``warmup_work``) were the warm-up's, not serving.
    warmup: bool = False
    #: What the evidence is, in words, for the answer ("a native crash", "killed by a signal", ...).
    kind: str = ""
    #: The line only says where its record failed (C++'s "Exception raised from X at f.cpp:N" after a
    #: c10 record): a warning-level record on the line right above is what failed, said with it.
    above: bool = False


@dataclass(frozen=True)
class Evidence:
    """A line that shows the server up or serving: its message starts with ``needle`` (or holds it,
    ``anywhere``) and, when given, ``regex`` matches the message."""

    needle: str
    regex: str | None = None
    anywhere: bool = False


#: uvicorn's access line with a 2xx answer (both engines serve through uvicorn): a served request.
#: Not a /metrics scrape: the HTTP server answers it even after the engine behind it died.
UVICORN_SERVED = Evidence("INFO:     ", r'^INFO: +\S+ - "[A-Z]+ (?!/metrics)[^"]*" 2\d\d')
#: Any uvicorn access line: the HTTP server was up and answering (a 4xx/5xx says no more than that).
UVICORN_ANSWERED = Evidence("INFO:     ", r'^INFO: +\S+ - "[A-Z]+ [^"]*" \d\d\d')


@dataclass(frozen=True)
class MetricRule:
    """A periodic figures line: ``kind`` is ``spec`` or ``throughput``; groups are read by name."""

    needle: str
    kind: str
    regex: str


@dataclass(frozen=True)
class LogGrammar:
    """Everything the analyzer knows about one engine's log."""

    engine: str
    #: Splits a line into process, level, timestamp and message.
    parse: Callable[[str], Header]
    stage_rules: tuple[StageRule, ...]
    bars: tuple[BarRule, ...]
    #: Lines that mean the server is ready (API up, warm-up done).
    ready: tuple[str, ...]
    #: Lines that mean an orderly shutdown.
    shutdown: tuple[str, ...]
    wrappers: tuple[Wrapper, ...]
    fatal: tuple[FatalRule, ...]
    metrics: tuple[MetricRule, ...]
    #: Process tier for root-cause choice: the first needle list that matches the process name
    #: gives its tier (0 = worker, 1 = engine core, 2 = front end); unmatched = last tier.
    process_tiers: tuple[tuple[str, ...], ...] = ()
    #: Lines that are not fatal but worth a hint when nothing failed (a negative KV budget).
    warnings: tuple[str, ...] = ()
    #: Tracebacks containing one of these are not fatal (a failed request, a logged warning).
    benign_tracebacks: tuple[str, ...] = ()
    #: Speculative-decoding settings read from the args dump: name -> (needle, regex with group ``v``).
    #: ``num_steps`` (drafts per verify step) lets the analyzer recompute an acceptance rate.
    spec_settings: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: Engine-specific hints, tried before the generic table in ``engines.logs.hints``.
    hints: tuple[tuple[str, str], ...] = ()
    #: Evidence, weakest first (the state machine takes the strongest in the window):
    #: ``up``: the HTTP server is up but the engine has not said "ready" (SGLang's uvicorn lines come
    #: before its warm-up): a crash after one is a crash of a server that was up.
    up: tuple[Evidence, ...] = ()
    #: ``serving``: the server answered a request (access lines; figures lines count too): it was
    #: ready, whatever the window holds of its startup.
    serving: tuple[Evidence, ...] = ()
    #: ``serving_errors``: errors only raised while serving ("Error in chat completion stream
    #: generator", a batch dump before a crash): the server was up, wherever they are in the window.
    serving_errors: tuple[Evidence, ...] = ()
    #: Function names whose frames in a traceback mean it failed while serving (the scheduler's
    #: ``event_loop_*``): the same as a serving error.
    serving_frames: tuple[str, ...] = ()
    #: The serving and figures needles that the engine's own warm-up request also prints (SGLang's
    #: scheduler batches): while the log shows the warm-up stage running, before any ready line, those
    #: lines and the serving frames of a traceback are the warm-up's, not serving. An answered HTTP
    #: request is not among them: the HTTP server answered.
    warmup_work: tuple[str, ...] = ()
    #: (caller, callee): a frame ``in callee`` after a frame ``in caller`` in the same traceback is a
    #: serving frame, where the callee alone is not (vLLM's ``execute_model`` runs for scheduled
    #: batches when the worker's busy loop calls it, but V0's memory profiling calls it at startup).
    serving_calls: tuple[tuple[str, str], ...] = ()
    #: (path fragment, function): a frame of the function in a file whose path holds the fragment is
    #: a serving frame, where the function elsewhere is not (vLLM V1's ``execute_model`` under ``/v1/``).
    serving_files: tuple[tuple[str, str], ...] = ()
    #: Function or file names in a traceback's frames -> the stage it failed in, for excerpts that
    #: start inside the traceback (no stage line before it). The innermost frame that matches wins.
    frame_stages: tuple[tuple[str, str], ...] = ()
    #: The process-name tag that numbers the ranks when each rank logs its own lines (SGLang's
    #: ``TP0`` … ``TP15``): a multi-node run then shows a stage row per rank
    #: (``engines.nodes.view``). Empty when a node's stage lines carry no rank tag.
    rank_tag: str = ""
    #: Where this engine's own line begins, as bytes regex sources (its logger header, a rank tag of
    #: its own): ``engines.logs.prefix`` tells a capture tool's prefix from the engine's line by them,
    #: beside the forms every engine shares (a process tag, a traceback, Python logging, uvicorn).
    line_starts: tuple[bytes, ...] = ()
    #: Of those, the headers a launcher's Python logger may re-log behind its own header
    #: (``2026-01-01 12:00:00 INFO <engine header> msg``): the launcher's header is a prefix.
    relogged_starts: tuple[bytes, ...] = ()


# -- header parsing -------------------------------------------------------------------------------

_LEVELS = ("DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL", "FATAL")
#: Characters of a logger's or a tracing target's name ("engine.start", "tokenizer_manager.sigterm_handler").
_TARGET_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.")
#: A container runtime's prefix: Docker's "2026-07-08T22:40:03.166647879Z " and the CRI (Kubernetes)
#: form "2025-07-25T07:53:08.21748708+08:00 stdout F ".
_CONTAINER_TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)(?: (?:stdout|stderr) [FP])? ")
_RAY_REPEAT = re.compile(r" \[repeated \d+x across cluster\]$")


def _strip_noise_wrappers(text: str) -> str:
    """Remove container-runtime timestamps and Ray's de-duplication suffix."""
    if text[:2] == "20" and len(text) > 21 and text[10:11] == "T":
        m = _CONTAINER_TS.match(text)
        if m:
            text = text[m.end() :]
    if text.endswith("cluster]"):
        text = _RAY_REPEAT.sub("", text)
    return text


def _split_dated(text: str) -> Header | None:
    """SGLang's late-2025 logger header ``YYYY-MM-DD HH:MM:SS[.mmm] LEVEL PID [ TPn file.py:N] msg``
    (the rank list is absent on single-process lines); None when ``text`` is not in that form."""
    if len(text) < 24 or text[4] != "-" or text[10] != " " or text[13] != ":":
        return None
    i = 19
    if text[i] == ".":
        i += 1
        while i < len(text) and text[i].isdigit():
            i += 1
    if text[i : i + 1] != " ":
        return None
    sp = text.find(" ", i + 1)
    if sp == -1 or text[i + 1 : sp] not in _LEVELS:
        return None
    level = text[i + 1 : sp]
    sp2 = text.find(" ", sp + 1)
    if sp2 == -1 or not text[sp + 1 : sp2].isdigit() or text[sp2 + 1 : sp2 + 2] != "[":
        return None
    close = text.find("] ", sp2)
    if close == -1:
        return None
    parts = text[sp2 + 2 : close].split()
    # the rank tags before the call site ("TP0", "DP0 TP1"); continuation lines are raw (no tag)
    return Header(" ".join(parts[:-1]), level, text[:19], text[close + 2 :])


def _split_level(rest: str) -> tuple[str, str, str, str]:
    """``LEVEL MM-DD HH:MM:SS [file.py:N] msg`` (vLLM's logger header) -> (level, ts, msg, tag)."""
    if rest[:1] == " " and rest[1:2] != " " and rest[1:2].isupper():
        rest = rest[1:]  # a launcher's "ts  WARN ..." (its level padded to five characters)
    sp = rest.find(" ")
    if sp < 4 or rest[:sp] not in _LEVELS:
        return "", "", rest, ""
    level = rest[:sp]
    after = rest[sp + 1 :]
    # timestamp "MM-DD HH:MM:SS" (14 chars), then " [file:N] " (V0 builds print "file:N] ")
    if len(after) >= 15 and after[2] == "-" and after[5] == " " and after[8] == ":":
        ts = after[:14]
        close = after.find("] ", 15)
        if close != -1:
            return level, ts, after[close + 2 :], after[15:close].lstrip("[")
        return level, ts, after[15:], ""
    colon = after.find(": ", 0, 64)
    if colon > 2 and after[0] != " " and "." in after[:colon] and _TARGET_CHARS.issuperset(after[:colon]):
        # "LEVEL target: msg" (a tracing target or a Python logger's name, as Dynamo and KServe print
        # them): the message is what follows the name
        return level, "", after[colon + 2 :], after[:colon]
    return level, "", after, ""


def header_parser(bare_procs: tuple[str, ...]) -> Callable[[str], Header]:
    """:func:`parse_header` that also reads an engine's process tag whose leading "(" a paste lost
    (``EngineCore_DP0 pid=7) INFO ...``, seen in real issue logs): ``bare_procs`` are the process
    names the engine's adapter gives its grammar."""
    return partial(_parse, bare_procs)


def parse_header(text: str) -> Header:
    """Parse either engine's header forms; returns the message with its own indentation.

    Accepted: vLLM ``(Proc pid=N) LEVEL MM-DD HH:MM:SS [f.py:N] msg`` (prefix and header each
    optional), SGLang ``[YYYY-MM-DD HH:MM:SS TP0] msg`` (optionally followed by ``LEVEL f.py:N:``),
    and the bare ``[TP0] msg`` form. Shared by the grammars (an engine whose pasted logs lose a
    process tag's "(" builds its own with :func:`header_parser`); kept cheap (no regex on the hot path).
    """
    return _parse((), text)


#: A colour code's remains after a process tag's ")": its ESC byte (and maybe its "[") lost in a copy.
_TAG_REMNANT = re.compile(r"\[?\d{1,3}(?:;\d{1,3})*m(?: |$)")
_LEAD_REMNANT = re.compile(r"\[?\d{1,3}(?:;\d{1,3})*m")


def _unremnant(text: str) -> str:
    """``text`` without the colour code before vLLM's tag whose ESC a copy lost ("36m(EngineCore pid=8)...")."""
    if text[:1] != "(" and (k := text.find("m(", 1, 12)) != -1 and _LEAD_REMNANT.fullmatch(text, 0, k + 1) is not None:
        return text[k + 1 :]
    return text


def _tag_end(text: str) -> tuple[int, int]:
    """(where a process tag's ")" is, where its text starts): ``(X pid=1) msg``, or with its colour
    code's remains after it, the ESC lost in a copy ("(Worker pid=4)[0;0m msg"); (-1, 1) for neither."""
    close = text.find(") ")
    first = text.find(")")
    if first != close and first != -1 and (m := _TAG_REMNANT.match(text, first + 1)) is not None:
        return first, m.end()
    return close, close + 2


def _parse(bare_procs: tuple[str, ...], text: str) -> Header:
    if text[:2] == "20" or text[-8:] == "cluster]":
        text = _strip_noise_wrappers(text)
        if text[:2] == "20":
            dated = _split_dated(text)
            if dated is not None:
                return dated
    process = ""
    c = text[:1]
    if c != "(" and (c == "[" or "0" <= c <= "9"):
        text = _unremnant(text)
        c = text[:1]
    rest = text
    if c == "(":
        close = text.find(")")
        if text[close + 1 : close + 2] == " ":
            after = close + 2
        else:
            close, after = _tag_end(text)
        if close == -1 and text[-1:] == ")":
            close, after = len(text) - 1, len(text)  # the tag alone (a blank line of the process's, its space stripped)
        pid = text.find(" pid=", 1, close) if close != -1 else -1
        if pid != -1:
            process = text[1:pid]
            rest = text[after:]
            # a process that relays another's output stacks the prefixes ("(APIServer pid=1)
            # (EngineCore_DP0 pid=2) (Worker_TP0 pid=3) msg"): the innermost one wrote the line
            while True:
                if rest[:1] != "(" and rest[:1] in "[0123456789":
                    rest = _unremnant(rest)
                if rest[:1] != "(":
                    break
                close, after = _tag_end(rest)
                pid = rest.find(" pid=", 1, close) if close != -1 else -1
                if pid == -1:
                    break
                process = rest[1:pid]
                rest = rest[after:]
            if rest[:1] == "[" and rest[:5] != "[rank" or rest[:2] == "20":
                # Ray's tag before the engine's own dated header ("(SGLangEngine pid=7) [2026-01-27
                # 06:50:01 TP4] msg"): the header's stamp, level and message; the writer stays Ray's
                # name, which the actor's bare lines (a traceback's frames) carry too
                nested = _parse(bare_procs, rest)
                if nested.ts:
                    return Header(process, nested.level, nested.ts, nested.msg, nested.tag)
    elif c == "[" and text.startswith("[rank"):
        # PyTorch's per-rank prefix "[rank3]: msg" (torchrun, Ray driver workers)
        close = text.find("]:", 5)
        if close != -1 and text[5:close].isdigit():
            rest = text[close + 2 :]
            process = text[1:close]
            if rest[:1] == " ":
                rest = rest[1:]
            rest = _unremnant(rest)
            if rest[:5] != "[rank" and rest[:1] in "([2":
                # the rank's own process prefix or engine header after PyTorch's: both name the
                # writer ("EngineCore_DP0@rank1"), so two ranks' copies of one process stay apart
                nested = _parse(bare_procs, rest)
                if nested.process or nested.ts or nested.level:
                    who = f"{nested.process}@{process}" if nested.process else process
                    return Header(who, nested.level, nested.ts, nested.msg, nested.tag)
            level, ts, msg, tag = _split_level(rest)
            return Header(process, level, ts, msg, tag)
    elif c == "[":
        close = text.find("] ")
        if close == -1 and text.endswith("]"):
            close = len(text) - 1
        if close > 0:
            inner = text[1:close]
            pid = inner.find(" pid=")
            if pid > 0 and inner[:1].isalpha() and inner[pid + 5 : pid + 6].isdigit():
                # vLLM's process tag in brackets (vllm-ascend 0.23: "[Worker_DP0_TP1_EP1 pid=40968] INFO ...")
                return _parse(bare_procs, f"({inner}) {text[close + 2 :]}")
            if len(inner) >= 19 and inner[4] == "-" and inner[13] == ":":
                msg = text[close + 2 :]
                level = ""
                sp = msg.find(" ")
                if sp > 3 and msg[:sp] in _LEVELS and msg[sp + 1 : sp + 2] != " ":
                    # "[ts] INFO utils.py:151: msg" (some 2026 builds)
                    level = msg[:sp]
                    colon = msg.find(": ", sp + 1)
                    msg = msg[colon + 2 :] if colon != -1 else msg[sp + 1 :]
                elif msg[:1] == "(" and not inner[20:]:
                    # a stamp before Ray's tag ("[2026-03-12 11:50:36] (TaskRunner pid=7)   File ..."):
                    # the tag names the writer, its text is the message
                    tagged = _parse(bare_procs, msg)
                    if tagged.process:
                        return Header(tagged.process, tagged.level, tagged.ts or inner[:19], tagged.msg, tagged.tag)
                return Header(inner[20:], level, inner[:19], msg)
            if inner[:2] in ("TP", "DP", "PP", "EP") and inner[2:3].isdigit():
                return Header(inner, "", "", text[close + 2 :])
            if len(inner) >= 14 and inner[2] == "-" and inner[5] == " " and inner[8] == ":" and inner[:2].isdigit():
                # SGLang's diffusion runtime (multimodal_gen): "[12-11 17:52:54] msg", no year, no rank
                return Header(inner[15:], "", inner[:14], text[close + 2 :])
    elif bare_procs and text.startswith(bare_procs):
        # a paste that lost the leading "(" (seen in real issue logs)
        close = text.find(") ")
        if close != -1 and " pid=" in text[:close]:
            inner = text[:close]
            process = inner[: inner.find(" pid=")]
            rest = text[close + 2 :]
    level, ts, msg, tag = _split_level(rest)
    return Header(process, level, ts, msg, tag)


def is_primary_process(process: str) -> bool:
    """True unless the name carries a non-zero rank (``TP3``, ``DP1``, ``rank=2``, ``rank2``).

    Stage progress is read from rank 0 only (every rank prints the same stages; only rank 0 draws
    bars); errors are read from every rank.
    """
    if not process:
        return True
    for tag in ("TP", "DP", "PP", "EP", "rank=", "rank"):
        i = process.find(tag)
        while i != -1:
            j = i + len(tag)
            k = j
            while k < len(process) and process[k].isdigit():
                k += 1
            if k > j and process[j:k].strip("0") != "":
                return False
            i = process.find(tag, k)
    return True
