"""patchtool's writes: files replaced by rename (all or none), the backups and the manifest, apply and revert.

The manifest (``applied.json`` in the state folder) records each touched file's sha256 before and
after and its backup, so ``revert`` restores it byte for byte. Standard library only (runs in
patchtool's bundle).
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING or __package__:  # imported by servelab (servelab.engines.helpers.*)
    from .patch_diff import PatchError
    from .patch_plan import Plan, sha256
else:  # run as a host script: patchtool's bundle folder is first on sys.path
    from patch_diff import PatchError
    from patch_plan import Plan, sha256

MANIFEST = "applied.json"


def write_atomic(path: str, data: bytes, mode: int | None = None) -> None:
    """Replace ``path`` by rename (never writing through it); parents are created."""
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.path.basename(path)}.servelab-{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def set_files(contents: dict[str, bytes | None], modes: dict[str, int]) -> None:
    """Bring every file to its wanted content (None: absent); on any failure put back what was there."""
    done: list[tuple[str, bytes | None]] = []
    try:
        for path, data in contents.items():
            try:
                with open(path, "rb") as f:
                    before: bytes | None = f.read()
            except FileNotFoundError:
                before = None
            if data is None:
                if before is not None:
                    os.unlink(path)
            else:
                write_atomic(path, data, modes.get(path))
            done.append((path, before))
    except BaseException:
        for path, before in reversed(done):
            try:
                if before is None:
                    if os.path.lexists(path):
                        os.unlink(path)
                else:
                    write_atomic(path, before, modes.get(path))
            except OSError:
                pass
        raise


def load_manifest(state: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(state, MANIFEST), "rb") as f:
            manifest: dict[str, Any] = json.loads(f.read())
            return manifest
    except (FileNotFoundError, ValueError):
        return None


def file_mode(path: str) -> int | None:
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        return None


def do_apply(plan: Plan, state: str, manifest: dict[str, Any] | None) -> dict[str, Any]:
    """Back up, record, then write every changed file (all or none); returns the updated manifest.

    The manifest is written before the files, so even a kill halfway leaves every file either as
    it was or as recorded, which ``revert`` can restore.
    """
    changed = [rel for rel in plan.order if plan.final[rel] != plan.original[rel]]
    previous = json.dumps(manifest).encode() if manifest else None
    manifest = manifest or {"root": plan.root, "patches": [], "files": {}}
    if not changed:
        return manifest
    stamp = time.strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}"
    modes: dict[str, int] = {}
    for rel in changed:
        path = plan.abspath(rel)
        mode = file_mode(path)
        if mode is not None:
            modes[path] = mode
        if rel in manifest["files"]:
            continue  # the first backup is the original; keep it
        original = plan.original[rel]
        backup = None
        if original is not None:
            backup = os.path.join("backups", stamp, *rel.split("/"))
            write_atomic(os.path.join(state, backup), original)
        manifest["files"][rel] = {"before": sha256(original), "backup": backup, "mode": mode}
    for rel in changed:
        manifest["files"][rel]["after"] = sha256(plan.final[rel])
    known = {p["sha256"] for p in manifest["patches"]}
    for p in plan.patches:
        if p["sha256"] not in known:
            manifest["patches"].append({"name": p["name"], "sha256": p["sha256"]})
    manifest["applied_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    path = os.path.join(state, MANIFEST)
    write_atomic(path, json.dumps(manifest, indent=2, sort_keys=True).encode())
    try:
        set_files({plan.abspath(rel): plan.final[rel] for rel in changed}, modes)
    except BaseException:
        if previous is None:
            os.unlink(path)
        else:
            write_atomic(path, previous)
        raise
    return manifest


def do_revert(root: str, state: str, manifest: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """Restore every recorded file from its backup, all or none; refuse files changed since."""
    files = []
    wanted: dict[str, bytes | None] = {}
    modes: dict[str, int] = {}
    for rel, info in sorted(manifest["files"].items()):
        path = os.path.join(root, *rel.split("/"))
        try:
            with open(path, "rb") as f:
                now: bytes | None = f.read()
        except FileNotFoundError:
            now = None
        now_sha = sha256(now)
        if now_sha == info["before"]:
            files.append({"path": rel, "sha256_before": now_sha, "sha256_after": now_sha, "changed": False})
            continue
        if now_sha != info.get("after"):
            raise PatchError(f"{rel} changed since servelab patched it (sha256 {str(now_sha)[:12]}, expected {str(info.get('after'))[:12]}): not reverting anything")
        if info["backup"] is None:
            data = None
        else:
            with open(os.path.join(state, info["backup"]), "rb") as f:
                data = f.read()
            if sha256(data) != info["before"]:
                raise PatchError(f"backup of {rel} is damaged (sha256 mismatch): not reverting anything")
        wanted[path] = data
        if info.get("mode") is not None:
            modes[path] = info["mode"]
        files.append({"path": rel, "sha256_before": now_sha, "sha256_after": info["before"], "changed": True})
    set_files(wanted, modes)
    return files, list(wanted)
