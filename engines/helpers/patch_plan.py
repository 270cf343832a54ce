"""The patch plan: what a patch set does to the files under a package root, decided in memory.

For each patch: already applied (found backwards), applies (forwards) or conflict; and the reverse
plan that undoes a set applied by hand. Standard library only (runs in patchtool's bundle).
"""

from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING or __package__:  # imported by servelab (servelab.engines.helpers.*)
    from .patch_diff import FilePatch, PatchError, apply_hunks, parse_patch
else:  # run as a host script: patchtool's bundle folder is first on sys.path
    from patch_diff import FilePatch, PatchError, apply_hunks, parse_patch


def sha256(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


class Plan:
    """What a patch set does to the files under ``root``, computed in memory."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.original: dict[str, bytes | None] = {}  # rel path -> bytes on disk now (None: absent)
        self.final: dict[str, bytes | None] = {}  # rel path -> bytes after the whole set
        self.patches: list[dict[str, Any]] = []
        self.order: list[str] = []

    def abspath(self, rel: str) -> str:
        return os.path.join(self.root, *rel.split("/"))

    def current(self, rel: str) -> bytes | None:
        if rel not in self.final:
            try:
                with open(self.abspath(rel), "rb") as f:
                    data: bytes | None = f.read()
            except FileNotFoundError:
                data = None
            self.original[rel] = data
            self.final[rel] = data
            self.order.append(rel)
        return self.final[rel]


def _apply_file(content: bytes | None, fp: FilePatch) -> bytes | None:
    if fp.old is None:  # creation
        if content is not None:
            raise PatchError(f"{fp.path}: would be created but already exists")
        return b"".join(b"".join(h.new) for h in fp.hunks)
    if content is None:
        raise PatchError(f"{fp.path}: no such file under the package root")
    result = apply_hunks(content, fp)
    if fp.new is None:  # deletion
        if result:
            raise PatchError(f"{fp.path}: would be deleted but has other content")
        return None
    return result


def _run_files(fps: list[FilePatch], state: dict[str, bytes | None], plan: Plan) -> dict[str, bytes | None]:
    """Apply file patches in order on ``state`` (paths not in it are read from the plan); PatchError if one fails."""
    out: dict[str, bytes | None] = {}
    for fp in fps:
        base = out[fp.path] if fp.path in out else (state[fp.path] if fp.path in state else plan.current(fp.path))
        out[fp.path] = _apply_file(base, fp)
    return out


def plan_patches(root: str, patches: list[dict[str, Any]], strip: int, manifest: dict[str, Any] | None) -> Plan:
    """Decide for each patch: ``applies``, ``applied`` (already) or ``conflict``; the plan holds the final bytes.

    Applied patches are found backwards (the last one is undone first, so patches stacked on the same
    lines are recognised); a patch that would also apply forwards counts as applied only when servelab
    recorded applying it (like GNU patch, forwards wins otherwise). The rest are applied forwards.
    """
    plan = Plan(root)
    recorded = {p["sha256"] for p in (manifest or {}).get("patches", [])}
    parsed: list[list[FilePatch] | None] = []
    for patch in patches:
        data: bytes = patch["bytes"]
        entry = {"name": patch["name"], "sha256": sha256(data), "status": "conflict", "detail": "", "files": []}
        plan.patches.append(entry)
        try:
            files = parse_patch(data, strip)
        except PatchError as exc:
            entry["detail"] = str(exc)
            parsed.append(None)
            continue
        entry["files"] = [fp.path for fp in files]
        parsed.append(files)

    # Backwards: which patches are already in the files?
    undone: dict[str, bytes | None] = {}
    applied = [False] * len(patches)
    for i in range(len(patches) - 1, -1, -1):
        fps = parsed[i]
        if fps is None:
            continue
        try:
            before = _run_files([fp.reversed() for fp in reversed(fps)], undone, plan)
        except PatchError:
            continue
        try:
            _run_files(fps, undone, plan)
            also_forward = True
        except PatchError:
            also_forward = False
        # Undoing a hunk that removed lines with no context matches anywhere: proves nothing.
        vacuous = any(not h.new for fp in fps if fp.old is not None and fp.new is not None for h in fp.hunks)
        if (also_forward or vacuous) and plan.patches[i]["sha256"] not in recorded:
            continue
        applied[i] = True
        undone.update(before)

    # Forwards: apply the others on the files as they are.
    for i, fps in enumerate(parsed):
        entry = plan.patches[i]
        if fps is None:
            continue
        if applied[i]:
            entry["status"], entry["detail"] = "applied", "already applied"
            continue
        try:
            after = _run_files(fps, plan.final, plan)
        except PatchError as exc:
            entry["detail"] = str(exc)
            continue
        entry["status"] = "applies"
        plan.final.update(after)
    return plan


def plan_reverse(root: str, patches: list[dict[str, Any]], strip: int) -> Plan:
    """Undo a patch set found applied without a servelab record (applied by hand): last patch first."""
    plan = Plan(root)
    for patch in reversed(patches):
        data: bytes = patch["bytes"]
        entry = {"name": patch["name"], "sha256": sha256(data), "status": "conflict", "detail": "", "files": []}
        plan.patches.insert(0, entry)
        try:
            fps = parse_patch(data, strip)
        except PatchError as exc:
            entry["detail"] = str(exc)
            continue
        entry["files"] = [fp.path for fp in fps]
        scratch: dict[str, bytes | None] = {}
        try:
            for fp in reversed(fps):
                base = scratch[fp.path] if fp.path in scratch else plan.current(fp.path)
                scratch[fp.path] = _apply_file(base, fp.reversed())
        except PatchError as exc:
            forward_ok = True
            scratch = {}
            for fp in fps:
                base = scratch[fp.path] if fp.path in scratch else plan.current(fp.path)
                try:
                    scratch[fp.path] = _apply_file(base, fp)
                except PatchError:
                    forward_ok = False
                    break
            entry["status"] = "not applied" if forward_ok else "conflict"
            entry["detail"] = "not applied: nothing to undo" if forward_ok else str(exc)
            continue
        entry["status"] = "reverted"
        plan.final.update(scratch)
    return plan
