"""Patch sets: an experiment's unified diffs, applied into the engine's installed package on its host.

The work happens on the host, in one round trip, by ``engines/helpers/patchtool.py`` run with the
host's own Python: it decides per patch whether it applies or is already applied, compiles every
touched file, imports every patched module with the patched text (before anything is written),
then writes all files or none, keeping backups under ``<workdir>/patches/<root-key>/`` so that a
revert restores them byte for byte. Applying twice is a no-op. The sha256 of every patch and of
every touched file before and after is returned, for the run to record.
"""

from __future__ import annotations

import base64
import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servelab.engines.errors import ServelabError
from servelab.engines.catalog.experiment import SourcedExperiment
from servelab.engines.helpers import HelperError, run_helper
from servelab.engines.hosts.base import Host, HostUnreachable
from servelab.engines.hosts.hostsfile import HostConfig

HELPER = "patchtool.py"
#: Patch paths are ``a/<package>/...``: one leading component is stripped.
STRIP = 1
#: Importing a patched vLLM module takes 10-30 s on a busy 2-core machine.
IMPORT_TIMEOUT = 300.0


@dataclass(frozen=True)
class PatchFile:
    """One patch of an experiment, read on this machine."""

    name: str
    path: Path
    data: bytes
    description: str = ""

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass(frozen=True)
class PatchStatus:
    """What one patch does to the package now: ``applies``, ``applied`` or ``conflict`` (revert: ``reverted``...)."""

    name: str
    sha256: str
    status: str
    detail: str = ""
    files: tuple[str, ...] = ()


@dataclass(frozen=True)
class FileRecord:
    """A file a patch set touches, relative to the package root, with its sha256 before and after."""

    path: str
    sha256_before: str | None
    sha256_after: str | None
    changed: bool
    module: str | None = None


@dataclass(frozen=True)
class CompileError:
    """A touched file that no longer compiles: file, line and the offending text."""

    path: str
    line: int
    text: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: SyntaxError: {self.message}: {self.text}"


@dataclass(frozen=True)
class ImportResult:
    module: str
    ok: bool
    message: str = ""


@dataclass
class PatchReport:
    """The answer of one check/apply/revert."""

    action: str
    ok: bool
    root: str
    state: str
    error: str | None = None
    changed: bool = False
    patches: list[PatchStatus] = field(default_factory=list)
    files: list[FileRecord] = field(default_factory=list)
    compile_errors: list[CompileError] = field(default_factory=list)
    imports: list[ImportResult] = field(default_factory=list)
    pycache_removed: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def record(self) -> dict[str, Any]:
        """What a run stores: every patch's sha256 and every touched file's sha256 before/after."""
        return {
            "root": self.root,
            "patches": {p.name: p.sha256 for p in self.patches},
            "files": {f.path: {"before": f.sha256_before, "after": f.sha256_after} for f in self.files},
        }

    def summary(self) -> str:
        """One line for a check list."""
        if not self.ok:
            return self.error or "failed"
        counts: dict[str, int] = {}
        for p in self.patches:
            counts[p.status] = counts.get(p.status, 0) + 1
        parts = [f"{n} {status}" for status, n in sorted(counts.items())]
        if self.imports:
            parts.append(f"{sum(i.ok for i in self.imports)} module(s) import")
        if self.pycache_removed:
            parts.append(f"{len(self.pycache_removed)} stale .pyc removed")
        return ", ".join(parts) or "no patches"


def load_patch_set(exp: SourcedExperiment) -> list[PatchFile]:
    """The experiment's patches, read from the experiments folder; a missing file is a one-line error."""
    out: list[PatchFile] = []
    for patch in exp.experiment.patches:
        path = exp.patch_path(patch)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ServelabError(f"{exp.name}: cannot read patch {patch.file}: {exc.strerror or exc}") from None
        out.append(PatchFile(name=Path(patch.file).name, path=path, data=data, description=patch.description))
    return out


def state_dir(host: HostConfig, root: str) -> str:
    """Where backups and the manifest of patches applied into ``root`` live on the host."""
    key = hashlib.sha256(root.encode()).hexdigest()[:12]
    return f"{host.workdir.rstrip('/')}/patches/{key}"


async def run_patchtool(
    host: Host,
    action: str,
    patches: list[PatchFile],
    root: str,
    *,
    python: str | None = None,
    state: str | None = None,
    imports: bool = True,
    timeout: float = IMPORT_TIMEOUT + 60.0,
) -> PatchReport:
    """Run the host-side patch tool once (``check``, ``apply`` or ``revert``)."""
    state = state or state_dir(host.config, root)
    request = {
        "root": root,
        "state": state,
        "strip": STRIP,
        "imports": imports,
        "import_timeout": IMPORT_TIMEOUT,
        "patches": [{"name": p.name, "data": base64.b64encode(p.data).decode()} for p in patches],
    }
    started = time.monotonic()
    try:
        answer = await run_helper(host, python or host.config.python, HELPER, action, request=request, timeout=timeout)
    except (HelperError, HostUnreachable) as exc:
        return PatchReport(action=action, ok=False, root=root, state=state, error=str(exc), seconds=time.monotonic() - started)
    return _report(action, answer, root, state, time.monotonic() - started)


def _report(action: str, a: dict[str, Any], root: str, state: str, seconds: float) -> PatchReport:
    return PatchReport(
        action=action,
        ok=bool(a.get("ok")),
        root=str(a.get("root", root)),
        state=str(a.get("state", state)),
        error=a.get("error"),
        changed=bool(a.get("changed")),
        patches=[
            PatchStatus(p["name"], p.get("sha256", ""), p.get("status", "?"), p.get("detail", ""), tuple(p.get("files", ())))
            for p in a.get("patches", [])
        ],
        files=[
            FileRecord(f["path"], f.get("sha256_before"), f.get("sha256_after"), bool(f.get("changed")), f.get("module"))
            for f in a.get("files", [])
        ],
        compile_errors=[CompileError(c["path"], int(c.get("line", 0)), c.get("text", ""), c.get("message", "")) for c in a.get("compile", [])],
        imports=[ImportResult(i["module"], bool(i.get("ok")), i.get("message", "")) for i in a.get("imports", [])],
        pycache_removed=list(a.get("pycache_removed", [])),
        seconds=seconds,
    )


async def check_patches(host: Host, patches: list[PatchFile], root: str, **kw: Any) -> PatchReport:
    """Does the set apply (or is it applied), compile and import? Writes nothing but stale .pyc removal."""
    return await run_patchtool(host, "check", patches, root, **kw)


async def apply_patches(host: Host, patches: list[PatchFile], root: str, **kw: Any) -> PatchReport:
    """Apply the whole set or nothing; a no-op when already applied. ``.record()`` is for the run."""
    return await run_patchtool(host, "apply", patches, root, **kw)


async def revert_patches(host: Host, patches: list[PatchFile], root: str, **kw: Any) -> PatchReport:
    """Restore what servelab patched under ``root`` byte for byte (or undo a hand-applied set)."""
    return await run_patchtool(host, "revert", patches, root, **kw)
