"""What this machine last saw of each host and its runs, so a host that cannot be reached is not "no run".

The host stays the source of truth; this is only memory of it. Every successful look at a host
(listing its runs, a run's status) records the runs with the time they were seen; a failed one
records since when the host has been unreachable and why. When a host is down, the CLI and the
dashboard name the run's host and its last known state ("last seen running at 07:41:12") instead
of claiming there is no such run, and the runs screen keeps that host's runs, greyed.

One small JSON file in servelab's state folder (``$SERVELAB_STATE_DIR``, else platformdirs'
user state dir), written atomically; a lost or unreadable file only costs the memory.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs

from servelab.engines.atomic_write import write_atomic

ENV_STATE_DIR = "SERVELAB_STATE_DIR"
FILE_NAME = "seen.json"
#: Runs kept per host (the newest); older ones are history the host itself still holds.
KEEP_RUNS = 200


def state_dir() -> Path:
    return Path(os.environ.get(ENV_STATE_DIR) or platformdirs.user_state_dir("servelab"))


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def clock(when: dt.datetime, today: dt.datetime | None = None) -> str:
    """``HH:MM:SS`` in local time; with the date when it was not today."""
    local = when.astimezone()
    ref = (today or now()).astimezone()
    return f"{local:%H:%M:%S}" if local.date() == ref.date() else f"{local:%Y-%m-%d %H:%M:%S}"


@dataclass
class SeenRun:
    """A run's record (``run.json`` / runctl's status, as JSON) and when this machine saw it so."""

    record: dict[str, Any]
    seen_at: dt.datetime

    @property
    def status(self) -> str:
        return str(self.record.get("status") or "unknown")


@dataclass
class HostSeen:
    """One host: when it last answered, since when it has not, and its runs as last seen."""

    key: str
    answered_at: dt.datetime | None = None
    down_since: dt.datetime | None = None
    reason: str = ""
    runs: dict[str, SeenRun] = field(default_factory=dict)
    #: The last time this machine asked the host and got no answer (None while it answers).
    checked_at: dt.datetime | None = None

    @property
    def reachable(self) -> bool:
        return self.down_since is None

    @property
    def since(self) -> str:
        """``HH:MM:SS`` the host stopped answering ("" while it answers)."""
        return clock(self.down_since) if self.down_since is not None else ""

    @property
    def note(self) -> str:
        """"unreachable, checked 12:04": what was last tried and when ("" while the host answers).
        The time is the last failed check, not the first: an outage seen by an earlier session
        does not read as checked now."""
        if self.down_since is None:
            return ""
        when = self.checked_at or self.down_since
        return f"unreachable, checked {clock(when)[:-3]}"  # HH:MM (with the date when not today)


def host_key(name: str, ssh: str | None, workdir: str) -> str:
    """Two folders may give one name to two machines: the key is the name, the target and the workdir."""
    return f"{name}|{ssh or 'local'}|{workdir}"


class SeenStore:
    """The memory, loaded once and saved after each change."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or state_dir() / FILE_NAME
        self._hosts: dict[str, HostSeen] | None = None

    # -- reading ---------------------------------------------------------------------------------
    def hosts(self) -> dict[str, HostSeen]:
        if self._hosts is None:
            self._hosts = _load(self.path)
        return self._hosts

    def host(self, key: str) -> HostSeen:
        return self.hosts().setdefault(key, HostSeen(key))

    def run(self, run_id: str) -> tuple[HostSeen, SeenRun] | None:
        """The host this machine last saw the run on, and how it was then."""
        best: tuple[HostSeen, SeenRun] | None = None
        for h in self.hosts().values():
            seen = h.runs.get(run_id)
            if seen is not None and (best is None or seen.seen_at > best[1].seen_at):
                best = (h, seen)
        return best

    # -- recording -------------------------------------------------------------------------------
    def answered(self, key: str, records: list[dict[str, Any]] | None = None, *, complete: bool = False) -> None:
        """The host answered; ``records`` are runs it reported (``complete``: all of its runs)."""
        h = self.host(key)
        t = now()
        changed = h.down_since is not None or h.answered_at is None or (t - h.answered_at).total_seconds() > 60
        h.answered_at, h.down_since, h.reason, h.checked_at = t, None, "", None
        if records is not None:
            if complete:
                ids = {str(r.get("id")) for r in records}
                changed |= bool(set(h.runs) - ids)
                h.runs = {k: v for k, v in h.runs.items() if k in ids}
            for r in records:
                run_id = str(r.get("id"))
                old = h.runs.get(run_id)
                changed |= old is None or old.record != r
                h.runs[run_id] = SeenRun(dict(r), t)
            if len(h.runs) > KEEP_RUNS:
                newest = sorted(h.runs.items(), key=lambda kv: str(kv[1].record.get("started_at", "")))[-KEEP_RUNS:]
                h.runs = dict(newest)
        if changed or records:
            self.save()

    def unreachable(self, key: str, reason: str) -> HostSeen:
        """The host did not answer; keeps the first moment it stopped answering."""
        h = self.host(key)
        t = now()
        first = h.down_since is None
        if first:
            h.down_since = t
        minute_changed = h.checked_at is None or h.checked_at.replace(second=0, microsecond=0) != t.replace(second=0, microsecond=0)
        h.reason, h.checked_at = reason, t
        if first or minute_changed:  # the shown time is to the minute: one write a minute at most
            self.save()
        return h

    def save(self) -> None:
        data = {"hosts": {k: _dump_host(h) for k, h in self.hosts().items()}}
        try:
            write_atomic(self.path, json.dumps(data, sort_keys=True).encode("utf-8"), durable=False)
        except OSError:
            return  # memory only: a read-only state folder must not break a command


def _when(value: object) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return dt.datetime.fromisoformat(value)
    except ValueError:
        return None


def _load(path: Path) -> dict[str, HostSeen]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    out: dict[str, HostSeen] = {}
    hosts = data.get("hosts") if isinstance(data, dict) else None
    for key, h in (hosts or {}).items():
        if not isinstance(h, dict):
            continue
        runs: dict[str, SeenRun] = {}
        for run_id, r in (h.get("runs") or {}).items():
            seen_at = _when(r.get("seen_at")) if isinstance(r, dict) else None
            if seen_at is not None and isinstance(r.get("record"), dict):
                runs[str(run_id)] = SeenRun(r["record"], seen_at)
        out[str(key)] = HostSeen(
            str(key), _when(h.get("answered_at")), _when(h.get("down_since")), str(h.get("reason") or ""), runs, _when(h.get("checked_at"))
        )
    return out


def _dump_host(h: HostSeen) -> dict[str, Any]:
    return {
        "answered_at": h.answered_at.isoformat() if h.answered_at else None,
        "down_since": h.down_since.isoformat() if h.down_since else None,
        "reason": h.reason,
        "checked_at": h.checked_at.isoformat() if h.checked_at else None,
        "runs": {k: {"record": v.record, "seen_at": v.seen_at.isoformat()} for k, v in h.runs.items()},
    }
