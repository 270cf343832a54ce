"""Host-side patch tool for servelab: apply unified diffs into an engine's installed package.

Run with the host's own Python (standard library only, Python >= 3.8, no servelab import):
``python -c <this file> ACTION`` with a JSON request on stdin; it prints one JSON answer on stdout
(anything the engine prints while being imported goes to stderr). ACTION is one of:

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
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from typing import Any

if sys.path and sys.path[0] in ("", "."):
    del sys.path[0]  # `python -c` puts the working folder first: never import from it

MANIFEST = "applied.json"
HUNK_RE = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(Exception):
    """A patch that cannot be parsed or applied; the message is one line."""


# -- parsing --------------------------------------------------------------------------------------
class Hunk:
    """One ``@@`` block: the old lines it expects and the new lines it leaves (with line endings)."""

    def __init__(self, old_start: int, old_len: int, new_start: int, new_len: int) -> None:
        self.old_start = old_start
        self.old_len = old_len
        self.new_start = new_start
        self.new_len = new_len
        self.old: list[bytes] = []
        self.new: list[bytes] = []
        self.tags = b""  # b" ", b"-", b"+" per body line, to count leading and trailing context

    @property
    def anchor(self) -> str:
        """Like GNU patch: less context after than before means the hunk ends at end of file; the reverse, at the start."""
        lead = len(self.tags) - len(self.tags.lstrip(b" "))
        trail = len(self.tags) - len(self.tags.rstrip(b" "))
        if lead > trail:
            return "end"
        if trail > lead:
            return "start"
        return ""

    def reversed(self) -> "Hunk":
        h = Hunk(self.new_start, self.new_len, self.old_start, self.old_len)
        h.old, h.new = self.new, self.old
        h.tags = self.tags.replace(b"-", b"\0").replace(b"+", b"-").replace(b"\0", b"+")
        return h


class FilePatch:
    """The hunks for one file; ``old``/``new`` are paths relative to the root, None for /dev/null."""

    def __init__(self, old: str | None, new: str | None) -> None:
        self.old = old
        self.new = new
        self.hunks: list[Hunk] = []

    @property
    def path(self) -> str:
        return self.new if self.new is not None else self.old  # type: ignore[return-value]

    def reversed(self) -> "FilePatch":
        fp = FilePatch(self.new, self.old)
        fp.hunks = [h.reversed() for h in self.hunks]
        return fp


def split_lines(data: bytes) -> list[bytes]:
    """Lines with their endings, split on b"\\n" only (a form feed or a lone \\r stays inside a line)."""
    if not data:
        return []
    parts = data.split(b"\n")
    lines = [p + b"\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _header_path(raw: bytes, strip: int) -> str | None:
    text = raw.decode("utf-8", "surrogateescape").rstrip("\r\n")
    text = text.split("\t", 1)[0].strip()
    if text.startswith('"') and text.endswith('"') and len(text) >= 2:
        text = text[1:-1]
    if text == "/dev/null":
        return None
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if len(parts) <= strip:
        raise PatchError(f"path {text!r} has no components left after stripping {strip}")
    parts = parts[strip:]
    if any(p == ".." for p in parts) or text.startswith("/") and strip == 0:
        raise PatchError(f"path {text!r} leaves the package root")
    return "/".join(parts)


def parse_patch(data: bytes, strip: int = 1) -> list[FilePatch]:
    """Every file section of a unified diff; text before, between and after sections is ignored."""
    lines = split_lines(data)
    files: list[FilePatch] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(b"--- ") and i + 1 < len(lines) and lines[i + 1].startswith(b"+++ "):
            fp = FilePatch(_header_path(line[4:], strip), _header_path(lines[i + 1][4:], strip))
            if fp.old is None and fp.new is None:
                raise PatchError(f"line {i + 1}: both sides are /dev/null")
            i += 2
            while i < len(lines) and lines[i].startswith(b"@@"):
                i = _parse_hunk(lines, i, fp)
            if not fp.hunks:
                raise PatchError(f"line {i + 1}: file section for {fp.path} has no hunks")
            files.append(fp)
            continue
        i += 1
    if not files:
        raise PatchError("no unified-diff file sections found (expected '--- a/...' and '+++ b/...' lines)")
    return files


def _parse_hunk(lines: list[bytes], i: int, fp: FilePatch) -> int:
    m = HUNK_RE.match(lines[i])
    if m is None:
        raise PatchError(f"line {i + 1}: malformed hunk header {lines[i][:60]!r}")
    old_len = int(m.group(2)) if m.group(2) is not None else 1
    new_len = int(m.group(4)) if m.group(4) is not None else 1
    hunk = Hunk(int(m.group(1)), old_len, int(m.group(3)), new_len)
    header_line = i + 1
    i += 1
    old_left, new_left = old_len, new_len
    last: list[list[bytes]] = []
    while old_left > 0 or new_left > 0:
        if i >= len(lines):
            raise PatchError(f"line {header_line}: hunk for {fp.path} ends early")
        line = lines[i]
        tag, body = line[:1], line[1:]
        if line in (b"\n", b"\r\n"):  # an editor stripped the space of an empty context line
            tag, body = b" ", line
        if tag == b" ":
            if old_left <= 0 or new_left <= 0:
                raise PatchError(f"line {i + 1}: hunk for {fp.path} has more lines than its header says")
            hunk.old.append(body)
            hunk.new.append(body)
            hunk.tags += b" "
            old_left -= 1
            new_left -= 1
            last = [hunk.old, hunk.new]
        elif tag == b"-":
            if old_left <= 0:
                raise PatchError(f"line {i + 1}: hunk for {fp.path} removes more lines than its header says")
            hunk.old.append(body)
            hunk.tags += b"-"
            old_left -= 1
            last = [hunk.old]
        elif tag == b"+":
            if new_left <= 0:
                raise PatchError(f"line {i + 1}: hunk for {fp.path} adds more lines than its header says")
            hunk.new.append(body)
            hunk.tags += b"+"
            new_left -= 1
            last = [hunk.new]
        elif tag == b"\\":
            _no_newline(last)
        else:
            raise PatchError(f"line {i + 1}: unexpected line in hunk for {fp.path}: {line[:60]!r}")
        i += 1
    while i < len(lines) and lines[i].startswith(b"\\"):
        _no_newline(last)
        i += 1
    fp.hunks.append(hunk)
    return i


def _no_newline(last: list[list[bytes]]) -> None:
    """``\\ No newline at end of file``: the line before it has no line ending."""
    for side in last:
        if side and side[-1].endswith(b"\n"):
            side[-1] = side[-1][:-1]


# -- applying -------------------------------------------------------------------------------------
def apply_hunks(content: bytes, fp: FilePatch) -> bytes:
    """``content`` with every hunk applied (exact context, any offset, hunks in order); PatchError if one does not fit."""
    lines = split_lines(content)
    out: list[bytes] = []
    pos = 0  # next unconsumed line of `lines`
    delta = 0  # how far the hunks found so far sat from their headers
    for n, hunk in enumerate(fp.hunks, 1):
        want = (hunk.old_start if hunk.old_len == 0 else hunk.old_start - 1) + delta
        if b" " in hunk.tags or not hunk.old:
            at = _find(lines, hunk.old, want, pos, hunk.anchor)
        else:  # no context: where else it matches proves nothing, so only where the header says
            at = want if want >= pos and lines[want : want + len(hunk.old)] == hunk.old else None
        if at is None:
            first = _first_removed(hunk).decode("utf-8", "replace").strip()
            raise PatchError(
                f"{fp.path}: hunk {n} (line {hunk.old_start}) does not match" + (f" near {first[:60]!r}" if first else "")
            )
        delta = at - (hunk.old_start - 1 if hunk.old_len else hunk.old_start)
        out.extend(lines[pos:at])
        out.extend(hunk.new)
        pos = at + len(hunk.old)
    out.extend(lines[pos:])
    return b"".join(out)


def _first_removed(hunk: Hunk) -> bytes:
    """The first line a hunk removes (what a reader looks for), else its first context line."""
    old_tags = [tag for tag in hunk.tags if tag != ord("+")]
    for tag, line in zip(old_tags, hunk.old):
        if tag == ord("-"):
            return line
    return hunk.old[0] if hunk.old else b""


def _find(lines: list[bytes], block: list[bytes], want: int, lo: int, anchor: str = "") -> int | None:
    """The start index nearest ``want`` (not before ``lo``) where ``block`` sits exactly in ``lines``."""
    if not block:  # a pure insertion without context goes where its header says
        return min(max(want, lo), len(lines))
    hi = len(lines) - len(block)
    if anchor == "end":
        lo = max(lo, hi)
    elif anchor == "start":
        hi = min(hi, 0)
    if hi < lo:
        return None
    want = min(max(want, lo), hi)
    for dist in range(0, max(want - lo, hi - want) + 1):
        for cand in (want - dist, want + dist):
            if lo <= cand <= hi and lines[cand : cand + len(block)] == block:
                return cand
    return None


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


# -- checks ---------------------------------------------------------------------------------------
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


# -- writing --------------------------------------------------------------------------------------
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


def revert_without_record(root: str, patches: list[dict[str, Any]], strip: int, answer: dict[str, Any]) -> dict[str, Any]:
    """Revert by applying the patches backwards (no backups exist); all files or none."""
    if not patches:
        answer["error"] = "nothing to revert: servelab has no record of patching this package"
        return answer
    plan = plan_reverse(root, patches, strip)
    answer["patches"] = plan.patches
    answer["files"] = [
        {"path": rel, "sha256_before": sha256(plan.original[rel]), "sha256_after": sha256(plan.final[rel]),
         "changed": plan.final[rel] != plan.original[rel], "module": module_name(rel)}
        for rel in plan.order
    ]
    bad = [p for p in plan.patches if p["status"] == "conflict"]
    if bad:
        answer["error"] = f"{bad[0]['name']}: cannot be undone: {bad[0]['detail']}"
        return answer
    answer["compile"] = compile_errors(plan)
    if answer["compile"]:
        e = answer["compile"][0]
        answer["error"] = f"{e['path']}:{e['line']}: SyntaxError after undoing: {e['message']}: {e['text']}"
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
    answer["patches"] = [{k: v for k, v in p.items()} for p in plan.patches]
    recorded = (manifest or {}).get("files", {})
    answer["files"] = [
        {
            # "before" is the file as it was before servelab patched it, when servelab did
            "path": rel,
            "sha256_before": recorded[rel]["before"] if rel in recorded else sha256(plan.original[rel]),
            "sha256_after": sha256(plan.final[rel]),
            "changed": plan.final[rel] != plan.original[rel],
            "module": module_name(rel),
        }
        for rel in plan.order
    ]
    conflicts = [p for p in plan.patches if p["status"] == "conflict"]
    if conflicts:
        answer["error"] = f"{conflicts[0]['name']}: {conflicts[0]['detail']}"
        return answer
    answer["compile"] = compile_errors(plan)
    if answer["compile"]:
        e = answer["compile"][0]
        answer["error"] = f"{e['path']}:{e['line']}: SyntaxError: {e['message']}: {e['text']}"
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
