"""patchtool's checks of a plan: every touched file compiles, every patched module imports with the
patched text (in a fresh interpreter, the text served from memory), and stale ``__pycache__`` entries.

Standard library only (runs in patchtool's bundle).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING or __package__:  # imported by servelab (servelab.engines.helpers.*)
    from .patch_diff import split_lines
    from .patch_plan import Plan
else:  # run as a host script: patchtool's bundle folder is first on sys.path
    from patch_diff import split_lines
    from patch_plan import Plan


def compile_errors(plan: Plan) -> list[dict[str, Any]]:
    """Every touched .py file must still compile; a SyntaxError names file, line and the offending text."""
    errors = []
    for rel in plan.order:
        data = plan.final.get(rel)
        if data is None or not rel.endswith(".py"):
            continue
        try:
            compile(data, plan.abspath(rel), "exec", dont_inherit=True)
        except SyntaxError as exc:
            # The line from the patched text itself (SyntaxError.text may come from the file on disk).
            text = ""
            lines = split_lines(data)
            if exc.lineno and 0 < exc.lineno <= len(lines):
                text = lines[exc.lineno - 1].decode("utf-8", "replace").rstrip("\r\n")
            errors.append({"path": rel, "line": exc.lineno or 0, "offset": exc.offset or 0, "text": text.strip(), "message": exc.msg})
        except ValueError as exc:  # null bytes
            errors.append({"path": rel, "line": 0, "offset": 0, "text": "", "message": str(exc)})
    return errors


def module_name(rel: str) -> str | None:
    """``vllm/config/speculative.py`` -> ``vllm.config.speculative``; ``pkg/__init__.py`` -> ``pkg``."""
    if not rel.endswith(".py"):
        return None
    parts = rel[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts or not all(p.isidentifier() for p in parts):
        return None
    return ".".join(parts)


#: Runs in a fresh interpreter: imports the patched modules, serving the patched text from memory
#: (so a check never writes a file) and never reusing a cached .pyc for them.
IMPORT_CHILD = r"""
import base64, importlib, importlib.machinery, json, sys, traceback
if sys.path and sys.path[0] in ("", "."):
    del sys.path[0]
import os
out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
req = json.loads(sys.stdin.read())
sys.path.insert(0, req["root"])
sys.dont_write_bytecode = True
texts = {path: base64.b64decode(b) for path, b in req["texts"].items()}

class Patched(importlib.machinery.SourceFileLoader):
    def get_data(self, path):
        if path in texts:
            return texts[path]
        return super().get_data(path)
    def get_code(self, fullname):
        path = self.get_filename(fullname)
        if path in texts:
            return compile(texts[path], path, "exec", dont_inherit=True)
        return super().get_code(fullname)

class Finder:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        # claim only the patched modules: any other goes down the interpreter's own meta path
        # (answering for every module put PathFinder before the finders packages install, and
        # SGLang's import then failed in torchvision: "operator torchvision::nms does not exist")
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.origin in texts:
            spec.loader = Patched(name, spec.origin)
            return spec
        return None

sys.meta_path.insert(0, Finder)
results = []
for name in req["modules"]:
    try:
        mod = importlib.import_module(name)
        results.append({"module": name, "ok": True, "file": getattr(mod, "__file__", None) or ""})
    except BaseException as exc:
        tb = traceback.extract_tb(exc.__traceback__)
        where = ""
        if tb:
            where = "%s:%s" % (tb[-1].filename, tb[-1].lineno)
        message = ("%s: %s" % (type(exc).__name__, exc)).splitlines()[0] if str(exc) else type(exc).__name__
        results.append({"module": name, "ok": False, "message": message, "where": where})
out.write(json.dumps(results) + "\n")
out.flush()
"""


def import_check(plan: Plan, timeout: float) -> list[dict[str, Any]]:
    """Import every patched module in a fresh interpreter, with the patched text served from memory."""
    modules: list[str] = []
    texts: dict[str, str] = {}
    for rel in plan.order:
        data = plan.final.get(rel)
        name = module_name(rel)
        if data is None or name is None:
            continue
        modules.append(name)
        if data != plan.original.get(rel):
            texts[plan.abspath(rel)] = base64.b64encode(data).decode()
    if not modules:
        return []
    request = json.dumps({"root": plan.root, "modules": modules, "texts": texts}).encode()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", IMPORT_CHILD],
            input=request,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=timeout,
            cwd=plan.root,
        )
    except subprocess.TimeoutExpired:
        return [{"module": m, "ok": False, "message": f"import did not finish in {timeout:.0f} s"} for m in modules]
    for line in reversed(proc.stdout.decode("utf-8", "replace").splitlines()):
        if line.startswith("["):
            results: list[dict[str, Any]] = json.loads(line)
            return results
    err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
    why = err[-1] if err else f"exit code {proc.returncode}"
    return [{"module": m, "ok": False, "message": f"import check crashed: {why}"} for m in modules]


def pycache_entries(source: str) -> list[str]:
    """Every cached bytecode file of ``source`` (all interpreter tags and optimisation levels)."""
    folder, name = os.path.split(source)
    stem = name[:-3] if name.endswith(".py") else name
    cache = os.path.join(folder, "__pycache__")
    try:
        names = os.listdir(cache)
    except OSError:
        return []
    return [os.path.join(cache, n) for n in sorted(names) if n.startswith(stem + ".") and n.endswith(".pyc") and n[len(stem) + 1 :].count(".") >= 1]


def pyc_is_stale(pyc: str, source: str) -> bool:
    """A cached file whose header does not describe the source as it is now (mtime/size or hash)."""
    try:
        with open(pyc, "rb") as f:
            head = f.read(16)
        st = os.stat(source)
    except OSError:
        return True
    if len(head) < 16:
        return True
    flags = int.from_bytes(head[4:8], "little")
    if flags & 1:  # hash-based
        import importlib.util

        with open(source, "rb") as f:
            return head[8:16] != importlib.util.source_hash(f.read())
    mtime = int.from_bytes(head[8:12], "little")
    size = int.from_bytes(head[12:16], "little")
    return mtime != (int(st.st_mtime) & 0xFFFFFFFF) or size != (st.st_size & 0xFFFFFFFF)


def remove_pycache(plan: Plan, only_stale: bool) -> list[str]:
    removed = []
    for rel in plan.order:
        source = plan.abspath(rel)
        for pyc in pycache_entries(source):
            if only_stale and os.path.exists(source) and not pyc_is_stale(pyc, source):
                continue
            try:
                os.unlink(pyc)  # a symlinked .pyc loses the link only
                removed.append(pyc)
            except FileNotFoundError:
                pass
    return removed
