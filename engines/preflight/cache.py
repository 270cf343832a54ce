"""A cache of slow preflight answers, keyed by a hash of everything the answer depends on.

The engine's own argument check costs a cold import of the engine (about 10 s for vLLM) and the
host facts cost an import of torch. Both answers depend only on inputs servelab can hash cheaply:
the interpreter, the engine's version and package root, the exact flags and environment, the patch
set, and the small files of the model and drafter folders the parser reads. A repeat with the same
hash answers from here, and the check line says it is cached. Only passing answers are kept: a
failure is always checked again. Stored as one JSON file per key under the user cache folder
(``$SERVELAB_CACHE`` overrides it, for tests).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs

from servelab.engines.hosts.base import Host
from servelab.engines.atomic_write import write_atomic

ENV_CACHE = "SERVELAB_CACHE"
#: The small files of a model folder whose content an answer depends on.
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer_config.json")
#: Entries older than this are not used (a week: long enough for a campaign's repeats).
MAX_AGE = 7 * 24 * 3600.0


def cache_dir() -> Path:
    env = os.environ.get(ENV_CACHE)
    return Path(env) if env else Path(platformdirs.user_cache_dir("servelab")) / "preflight"


def digest(*parts: Any) -> str:
    """sha256 of the parts as canonical JSON."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


async def folder_digest(host: Host, folder: str | None) -> str | None:
    """sha256 over the small files of a model folder as the host has them now (None: no folder)."""
    if folder is None:
        return None
    h = hashlib.sha256()
    for name in MODEL_FILES:
        try:
            data = await host.read_bytes(f"{folder.rstrip('/')}/{name}", 0, 8_000_000)
        except OSError:
            data = b"<absent>"
        h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


@dataclass(frozen=True)
class Cached:
    """A stored answer and when it was computed."""

    value: dict[str, Any]
    saved: float

    def age(self) -> str:
        s = max(0.0, time.time() - self.saved)
        return f"{s:.0f} s" if s < 120 else (f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.0f} h")


def get(kind: str, key: str) -> Cached | None:
    path = cache_dir() / f"{kind}-{key[:32]}.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("key") != key or not isinstance(doc.get("value"), dict):
        return None
    saved = float(doc.get("saved", 0))
    if time.time() - saved > MAX_AGE:
        return None
    return Cached(doc["value"], saved)


def put(kind: str, key: str, value: dict[str, Any]) -> None:
    """Store an answer (atomically; a cache that cannot be written is only slower)."""
    folder = cache_dir()
    try:
        data = json.dumps({"key": key, "saved": time.time(), "value": value}).encode("utf-8")
        write_atomic(folder / f"{kind}-{key[:32]}.json", data, durable=False)
    except OSError:
        return
