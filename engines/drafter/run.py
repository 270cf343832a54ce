"""The one call preflight, launch and ``servelab drafter`` make: read on the host, ask the adapter, check."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from servelab.engines.adapters.base import EngineAdapter
from servelab.engines.drafter.checks import DrafterCase, check
from servelab.engines.drafter.facts import FactsError, read_model, weight_names
from servelab.engines.drafter.findings import Finding, blocking
from servelab.engines.drafter.rules import EngineRules, RulesQuery, SourceReader
from servelab.engines.drafter.provenance import judge, recorded_target
from servelab.engines.helpers import run_helper
from servelab.engines.weights.fingerprint import target_identity
from servelab.engines.hosts.base import Host

#: Engine source files are read whole; none of the ones the rules need is near this size.
MAX_SOURCE = 2_000_000


@dataclass
class DrafterReport:
    """The findings of one drafter check and where its rules came from."""

    findings: list[Finding] = field(default_factory=list)
    rules: EngineRules | None = None
    seconds: float = 0.0

    def blocking(self, allow: list[str] | tuple[str, ...] = ()) -> list[Finding]:
        return blocking(self.findings, allow)

    def to_json(self) -> dict[str, Any]:
        return {"findings": [f.to_json() for f in self.findings]}

    def summary(self, allow: list[str] | tuple[str, ...] = ()) -> str:
        counts = {s: sum(f.severity == s for f in self.findings) for s in ("error", "warning", "info")}
        allowed = [f.code for f in self.findings if f.severity == "error" and f.code in allow]
        text = f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} note(s)"
        if allowed:
            text += f"; allowed by the experiment: {', '.join(sorted(set(allowed)))}"
        return text


async def package_facts(host: Host, python: str, package: str) -> tuple[str | None, str | None]:
    """The engine's package root and version on the host, without importing the engine (or torch)."""
    answer = await run_helper(host, python, "hostinfo.py", package, "--quick", timeout=60)
    root, version = answer.get("root"), answer.get("version")
    return (str(root) if root else None, str(version) if version else None)


def source_reader(host: Host, root: str | None) -> SourceReader:
    """Reads files of the installed engine under ``root`` (the folder holding the package), each once."""
    seen: dict[str, str | None] = {}

    async def read(rel: str) -> str | None:
        if root is None:
            return None
        if rel not in seen:
            try:
                seen[rel] = (await host.read_bytes(f"{root.rstrip('/')}/{rel}", 0, MAX_SOURCE)).decode("utf-8", "replace")
            except OSError:
                seen[rel] = None
        return seen[rel]

    return read


async def check_drafter(
    host: Host,
    adapter: EngineAdapter,
    *,
    python: str,
    method: str,
    draft_path: str,
    target_path: str,
    max_model_len: int | None = None,
    num_tokens: int | None = None,
    patched_files: frozenset[str] = frozenset(),
    package_root: str | None = None,
    version: str | None = None,
) -> DrafterReport:
    """Read both folders and the engine's rules on ``host`` and return the findings.

    A folder that cannot be read at all is a ``FactsError`` (one line); everything else is a finding.
    """
    t0 = time.monotonic()
    target = await read_model(host, target_path)
    if method == "mtp":
        # The MTP layers live in the target's own checkpoint: its index says whether they are there.
        # The MTP weights load from the draft path (the target's own folder unless a separate NextN checkpoint is named).
        same = draft_path.rstrip("/") == target_path.rstrip("/")
        names, where = await weight_names(host, draft_path)
        target = replace(target, weight_names=names, weight_names_source=where if same else f"{draft_path}: {where}")
        drafter = target if same else await read_model(host, draft_path)
    else:
        drafter = await read_model(host, draft_path, weights=True, target_vocab=target.vocab_size)
    if package_root is None:
        package_root, found = await package_facts(host, python, adapter.package)
        version = version or found
    query = RulesQuery(
        version=version,
        target_arch=target.architectures[0] if target.architectures else None,
        target_model_type=target.text_model_type,
        drafter_arch=drafter.architectures[0] if drafter.architectures else None,
        method=method,
        target_config=target.config,
        drafter_config=drafter.config,
    )
    rules = await adapter.drafter_rules(source_reader(host, package_root), query)
    case = DrafterCase(drafter=drafter, target=target, method=method, draft_path=draft_path, max_model_len=max_model_len,
                       patched_files=patched_files, num_tokens=num_tokens)
    findings = check(case, rules)
    findings += await provenance_findings(host, python, draft_path, target_path, target.text_model_type)
    return DrafterReport(findings=findings, rules=rules, seconds=time.monotonic() - t0)


async def provenance_findings(host: Host, python: str, draft_path: str, target_path: str, target_model_type: str | None) -> list[Finding]:
    """A warning when the drafter's training record names another target than the one served."""
    rec = await recorded_target(host, draft_path)
    if rec.empty:
        return []
    served = await target_identity(host, python, target_path) if rec.fingerprint else None
    matches, why = judge(rec, draft_path, target_path, served, target_model_type)
    if matches is not False:
        return []
    return [Finding(
        "target-provenance-mismatch", "warning",
        "the drafter was trained for another target than the one served: its draft tokens will rarely be accepted",
        why, "serve the target the record names, or [speculative] draft_model = a drafter trained on this target's hidden states",
    )]


__all__ = ["DrafterReport", "FactsError", "check_drafter", "package_facts", "source_reader"]
