"""This machine's copies of run logs (the spool): where each lives, and pruning old ones."""

from __future__ import annotations

import time
from pathlib import Path

from platformdirs import user_cache_dir

#: Local log copies older than this are removed when a run screen opens.
SPOOL_DAYS = 7


def spool_path(run_id: str) -> Path:
    """Where this machine keeps its copy of a run's log."""
    return Path(user_cache_dir("servelab")) / "spool" / f"{run_id}.log"


def prune_spool(folder: Path, max_age_s: float = SPOOL_DAYS * 86400) -> None:
    """Drop local log copies not opened for a while (the host keeps the real log)."""
    cutoff = time.time() - max_age_s
    for old in folder.glob("*.log"):
        try:
            if old.stat().st_mtime < cutoff:
                old.unlink()
        except OSError:
            continue
