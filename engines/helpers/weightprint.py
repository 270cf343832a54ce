"""A model folder's fingerprint from its weights, not its path: run on the host beside the weights.

    python weightprint.py            # JSON request on stdin: {"folder": ..., "cache": <file or null>}

Standard library only (the host has only the engine's environment; ``envs/tiny/build.py`` imports it
too, to record which target a drafter was trained for). It reads, whatever the checkpoint's size:

- the first 8 bytes of every ``*.safetensors`` shard (its header length) and each shard's size;
- the whole header (names, dtypes, shapes) of SAMPLED_SHARDS fixed shards (first, middle, last);
- two SLICE-byte slices (the start and the middle) of SAMPLED_TENSORS tensors at fixed places in the
  sorted names of those shards;
- ``config.json`` and the tokenizer's files (hashed whole; they are small).

The answer splits the fingerprint into parts, so a change can be named: ``layout`` (shard sizes,
header lengths, names/dtypes/shapes), ``weights`` (the slices), ``config``, ``tokenizer``. Same
layout, config and tokenizer with other weights is "the same architecture, retrained or fine-tuned".
With ``cache`` the answer is kept per folder, keyed by each file's name, size, mtime and inode; a
file replaced in place (a new inode or mtime) is read again.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
import time
from typing import Any

#: Bytes of each slice of a sampled tensor.
SLICE = 4096
SAMPLED_SHARDS = 3
SAMPLED_TENSORS = 8
MAX_HEADER = 100_000_000
CONFIG_FILES = ("config.json",)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tiktoken.model", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.json", "merges.txt", "chat_template.jinja", "chat_template.json")
#: A small file larger than this is hashed by its size and first and last MiB only.
SMALL_LIMIT = 16 << 20
#: Answers kept in a cache file.
CACHE_ENTRIES = 64
VERSION = 1


class PrintError(Exception):
    """A folder that cannot be fingerprinted; the message is one line."""


class Reader:
    """Ranged reads of local files, counting the bytes read."""

    def __init__(self) -> None:
        self.bytes_read = 0

    def read(self, path: str, offset: int, size: int) -> bytes:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(size)
        self.bytes_read += len(data)
        return data


def _h(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p)
        h.update(b"\0")
    return h.hexdigest()[:16]


def _header(reader: Reader, path: str) -> tuple[int, dict[str, Any]]:
    prefix = reader.read(path, 0, 8)
    if len(prefix) < 8:
        raise PrintError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", prefix)
    if n <= 1 or n > MAX_HEADER:
        raise PrintError(f"{path}: header length {n} is not a safetensors header")
    try:
        doc = json.loads(reader.read(path, 8, n))
    except ValueError:
        raise PrintError(f"{path}: the header is not JSON") from None
    if not isinstance(doc, dict):
        raise PrintError(f"{path}: the header is not a JSON object")
    doc.pop("__metadata__", None)
    return n, doc


def _small(reader: Reader, path: str, size: int) -> bytes:
    if size <= SMALL_LIMIT:
        return reader.read(path, 0, size)
    return str(size).encode() + reader.read(path, 0, 1 << 20) + reader.read(path, size - (1 << 20), 1 << 20)


def stat_key(folder: str) -> tuple[str, list[str], dict[str, os.stat_result]]:
    """The cache key of a folder (its files' names, sizes, mtimes and inodes), its shards, each file's stat."""
    try:
        names = sorted(os.listdir(folder))
    except OSError as exc:
        raise PrintError(f"{folder}: cannot list the folder ({exc.strerror or exc})") from None
    shards = [n for n in names if n.endswith(".safetensors")]
    if not shards:
        raise PrintError(f"{folder}: no *.safetensors files")
    wanted = [*shards, *(n for n in (*CONFIG_FILES, *TOKENIZER_FILES) if n in names)]
    stats: dict[str, os.stat_result] = {}
    for n in wanted:
        try:
            stats[n] = os.stat(os.path.join(folder, n))
        except OSError as exc:
            raise PrintError(f"{folder}/{n}: cannot stat ({exc.strerror or exc})") from None
    key = _h(os.path.realpath(folder).encode(), str(VERSION).encode(),
             *(f"{n}|{s.st_size}|{s.st_mtime_ns}|{s.st_ino}".encode() for n, s in stats.items()))
    return key, shards, stats


def sampled(items: list[Any], count: int) -> list[Any]:
    """``count`` items at fixed fractions of the list (first and last always), in order, no repeats."""
    if len(items) <= count:
        return list(items)
    idx = sorted({round(i * (len(items) - 1) / (count - 1)) for i in range(count)})
    return [items[i] for i in idx]


def fingerprint(folder: str, reader: Reader | None = None) -> dict[str, Any]:
    """The folder's fingerprint and its parts, with what it cost (``bytes_read``, ``seconds``)."""
    reader = reader or Reader()
    t0 = time.monotonic()
    _key, shards, stats = stat_key(folder)
    layout = hashlib.sha256()
    headers: dict[str, tuple[int, dict[str, Any]]] = {}
    chosen = sampled(shards, SAMPLED_SHARDS)
    for name in shards:
        path = os.path.join(folder, name)
        if name in chosen:
            headers[name] = _header(reader, path)
            n = headers[name][0]
        else:
            prefix = reader.read(path, 0, 8)
            n = struct.unpack("<Q", prefix)[0] if len(prefix) == 8 else -1
        layout.update(f"{stats[name].st_size}|{n};".encode())
    tensors: list[tuple[str, str, int, int, int]] = []  # (shard, tensor, data start, begin, end)
    for name in chosen:
        n, doc = headers[name]
        for t in sorted(doc):
            entry = doc[t]
            if not isinstance(entry, dict):
                raise PrintError(f"{folder}/{name}: entry {t!r} is not an object")
            layout.update(f"{t}|{entry.get('dtype')}|{entry.get('shape')};".encode())
            off = entry.get("data_offsets") or [0, 0]
            if isinstance(off, list) and len(off) == 2 and all(isinstance(x, int) for x in off) and off[1] > off[0]:
                tensors.append((name, t, 8 + n, off[0], off[1]))
    weights = hashlib.sha256()
    for shard, t, start, begin, end in sampled(tensors, SAMPLED_TENSORS):
        path = os.path.join(folder, shard)
        size = end - begin
        mid = begin + (size // 2) // SLICE * SLICE
        weights.update(t.encode())
        weights.update(reader.read(path, start + begin, min(SLICE, size)))
        if mid > begin:
            weights.update(reader.read(path, start + mid, min(SLICE, end - mid)))

    def files_hash(names: tuple[str, ...]) -> str:
        present = [n for n in names if n in stats]
        if not present:
            return ""
        return _h(*(n.encode() + b"=" + _small(reader, os.path.join(folder, n), stats[n].st_size) for n in present))

    parts = {"layout": layout.hexdigest()[:16], "weights": weights.hexdigest()[:16],
             "config": files_hash(CONFIG_FILES), "tokenizer": files_hash(TOKENIZER_FILES)}
    return {
        "fingerprint": _h(*(f"{k}={v}".encode() for k, v in sorted(parts.items()))),
        **parts,
        "shards": len(shards),
        "bytes_read": reader.bytes_read,
        "seconds": round(time.monotonic() - t0, 4),
        "cached": False,
    }


def cached_fingerprint(folder: str, cache: str | None, reader: Reader | None = None) -> dict[str, Any]:
    """:func:`fingerprint`, kept in ``cache`` (a JSON file) by the folder's files' sizes, mtimes and inodes."""
    t0 = time.monotonic()
    key = stat_key(folder)[0]
    store: dict[str, Any] = {}
    if cache:
        try:
            with open(cache, encoding="utf-8") as f:
                loaded = json.load(f)
            store = loaded if isinstance(loaded, dict) else {}
        except (OSError, ValueError):
            store = {}
        hit = store.get(key)
        if isinstance(hit, dict) and "fingerprint" in hit:
            return {**hit, "bytes_read": 0, "seconds": round(time.monotonic() - t0, 4), "cached": True}
    answer = fingerprint(folder, reader)
    if cache:
        store[key] = answer
        while len(store) > CACHE_ENTRIES:
            store.pop(next(iter(store)))
        try:
            os.makedirs(os.path.dirname(cache) or ".", exist_ok=True)
            tmp = f"{cache}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(store, f)
            os.replace(tmp, cache)
        except OSError:
            pass  # a cache that cannot be written costs a read next time, nothing else
    return answer


def main() -> int:
    try:
        request = json.loads(sys.stdin.read() or "{}")
        folder = str(request["folder"])
        cache = request.get("cache")
        answer = cached_fingerprint(folder, str(cache) if cache else None)
    except PrintError as exc:
        answer = {"error": str(exc)}
    except (ValueError, KeyError, TypeError) as exc:
        answer = {"error": f"weightprint: bad request ({exc})"}
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
