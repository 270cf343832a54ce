"""Host-side patch tool for servelab: apply unified diffs into an engine's installed package.

Run with the host's own Python (standard library only, Python >= 3.8, no servelab import) as a
host script (``python <bundle>/patchtool.py ACTION``, the bundle holding the modules below) with a
JSON request on stdin; it prints one JSON answer on stdout (anything the engine prints while being
imported goes to stderr). ACTION is one of:

- ``check``: does every patch apply cleanly (or is it already applied)? Does every touched file
  still compile, and does every patched module import with the patched text? Nothing is written,
  except stale ``__pycache__`` entries of touched files, which are removed.
- ``apply``: the same checks, then all files written or none (backups first, then an atomic rename
  per file, rolled back on any failure). Applying an already applied set changes nothing.
- ``revert``: restore every file the recorded apply touched, byte for byte, from the backups.

Request: ``{"root": DIR, "state": DIR, "patches": [{"name": N, "data": BASE64}], "strip": 1,
"imports": true, "import_timeout": 300}``. ``root`` is the folder holding the engine's package
(``a/vllm/x.py`` lands in ``ROOT/vllm/x.py``); ``state`` keeps backups and the manifest.

Files are only ever replaced by rename, never written in place: a file that is a symlink is
replaced by a regular file and the link's target is never touched.

The work is in the modules beside it: ``patch_diff.py`` (parsing, hunks applied in memory),
``patch_plan.py`` (what a set does: applied, applies or conflict; the reverse plan),
``patch_checks.py`` (compile, import, ``__pycache__``) and ``patch_files.py`` (writing, backups,
the manifest, apply and revert). This file answers the request.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any

if sys.path and sys.path[0] in ("", "."):
    del sys.path[0]  # never import from the working folder

if TYPE_CHECKING or __package__:  # imported by servelab (servelab.engines.helpers.patchtool)
    from .patch_checks import compile_errors, import_check, module_name, remove_pycache
    from .patch_diff import PatchError, apply_hunks, parse_patch, split_lines
    from .patch_files import MANIFEST, do_apply, do_revert, file_mode, load_manifest, set_files
    from .patch_plan import Plan, plan_patches, plan_reverse, sha256
else:  # run as a host script: its bundle's folder is first on sys.path
    from patch_checks import compile_errors, import_check, module_name, remove_pycache
    from patch_diff import PatchError, apply_hunks, parse_patch, split_lines
    from patch_files import MANIFEST, do_apply, do_revert, file_mode, load_manifest, set_files
    from patch_plan import Plan, plan_patches, plan_reverse, sha256

__all__ = ["MANIFEST", "PatchError", "Plan", "apply_hunks", "do_apply", "handle", "main", "parse_patch", "split_lines"]


def _report(plan: Plan, answer: dict[str, Any], recorded: dict[str, Any], undoing: bool) -> bool:
    """The plan's patches and files into ``answer``; False (with ``answer["error"]``) on a conflict or
    a file that no longer compiles. ``recorded``: the manifest's files, whose "before" is the file as
    it was before servelab patched it."""
    answer["patches"] = [dict(p) for p in plan.patches]
    answer["files"] = [
        {
            "path": rel,
            "sha256_before": recorded[rel]["before"] if rel in recorded else sha256(plan.original[rel]),
            "sha256_after": sha256(plan.final[rel]),
            "changed": plan.final[rel] != plan.original[rel],
            "module": module_name(rel),
        }
        for rel in plan.order
    ]
    bad = [p for p in plan.patches if p["status"] == "conflict"]
    if bad:
        answer["error"] = f"{bad[0]['name']}: {'cannot be undone: ' if undoing else ''}{bad[0]['detail']}"
        return False
    answer["compile"] = compile_errors(plan)
    if answer["compile"]:
        e = answer["compile"][0]
        answer["error"] = f"{e['path']}:{e['line']}: SyntaxError{' after undoing' if undoing else ''}: {e['message']}: {e['text']}"
        return False
    return True


def revert_without_record(root: str, patches: list[dict[str, Any]], strip: int, answer: dict[str, Any]) -> dict[str, Any]:
    """Revert by applying the patches backwards (no backups exist); all files or none."""
    if not patches:
        answer["error"] = "nothing to revert: servelab has no record of patching this package"
        return answer
    plan = plan_reverse(root, patches, strip)
    if not _report(plan, answer, {}, undoing=True):
        return answer
    changed = [rel for rel in plan.order if plan.final[rel] != plan.original[rel]]
    modes = {plan.abspath(r): m for r in changed if (m := file_mode(plan.abspath(r))) is not None}
    set_files({plan.abspath(rel): plan.final[rel] for rel in changed}, modes)
    answer["pycache_removed"] = remove_pycache(plan, only_stale=not changed)
    answer.update(ok=True, changed=bool(changed))
    return answer


# -- the request ----------------------------------------------------------------------------------
def handle(action: str, req: dict[str, Any]) -> dict[str, Any]:
    root = os.path.abspath(req["root"])
    state = req["state"]
    strip = int(req.get("strip", 1))
    patches = [{"name": p["name"], "bytes": base64.b64decode(p["data"])} for p in req.get("patches", [])]
    answer: dict[str, Any] = {"action": action, "root": root, "state": state, "ok": False, "changed": False, "error": None,
                    "patches": [], "files": [], "compile": [], "imports": [], "pycache_removed": []}
    if not os.path.isdir(root):
        answer["error"] = f"package root {root} is not a folder"
        return answer
    manifest = load_manifest(state)
    if action == "revert" and (manifest is None or not manifest.get("files")):
        return revert_without_record(root, patches, strip, answer)
    if action == "revert" and manifest is not None:
        files, written = do_revert(root, state, manifest)
        plan = Plan(root)
        for rel in manifest["files"]:
            plan.current(rel)
        answer["pycache_removed"] = remove_pycache(plan, only_stale=False) if written else []
        os.replace(os.path.join(state, MANIFEST), os.path.join(state, f"reverted-{time.strftime('%Y%m%dT%H%M%S')}.json"))
        reverted = [{**p, "status": "reverted", "detail": "", "files": []} for p in manifest.get("patches", [])]
        answer.update(ok=True, changed=bool(written), files=files, patches=reverted)
        return answer
    plan = plan_patches(root, patches, strip, manifest)
    if not _report(plan, answer, (manifest or {}).get("files", {}), undoing=False):
        return answer
    if req.get("imports", True):
        answer["imports"] = import_check(plan, float(req.get("import_timeout", 300)))
        bad = [i for i in answer["imports"] if not i["ok"]]
        if bad:
            answer["error"] = f"{bad[0]['module']} does not import: {bad[0]['message']}"
            return answer
    if action == "apply":
        os.makedirs(state, exist_ok=True)
        do_apply(plan, state, manifest)
        answer["changed"] = any(f["changed"] for f in answer["files"])
        answer["pycache_removed"] = remove_pycache(plan, only_stale=not answer["changed"])
        for p in answer["patches"]:
            if p["status"] == "applies":
                p["status"] = "applied"
                p["detail"] = "applied now"
    else:
        answer["pycache_removed"] = remove_pycache(plan, only_stale=True)
    answer["ok"] = True
    return answer


def main(argv: list[str]) -> int:
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever an imported engine prints goes to stderr, not into the answer
    action = argv[1] if len(argv) > 1 else ""
    if action not in ("check", "apply", "revert"):
        out.write(json.dumps({"ok": False, "error": f"unknown action {action!r} (check, apply, revert)"}) + "\n")
        return 2
    try:
        req = json.loads(sys.stdin.buffer.read())
        answer = handle(action, req)
    except (PatchError, OSError, ValueError, KeyError) as exc:
        answer = {"action": action, "ok": False, "error": str(exc).splitlines()[0] if str(exc) else type(exc).__name__}
    out.write(json.dumps(answer) + "\n")
    out.flush()
    return 0 if answer.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
