"""One way to replace a file whole: write a temporary file beside it, then rename it over the old one.

A reader sees the old content or the new, never a part; a failed write leaves the old file and no
temporary behind. ``durable`` adds an fsync before the rename (a run's own records, whose loss a
crash must not cause); caches skip it. Host scripts (``helpers/hostlib.py``) keep their own copy:
they run on hosts with the standard library only.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def write_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` (its folder is made when missing); ``OSError`` when it cannot be."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
