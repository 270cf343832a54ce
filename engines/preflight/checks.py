"""Preflight: everything that can fail before a 25-minute model load, checked in seconds on the host.

Each check is one pass/fail line with its reason and duration: the host answers; the engine's
Python runs; engine, torch and CUDA versions and the GPU count (one helper call with the host's
interpreter); model and drafter folders exist with a config.json, and the drafter fits the target on
this engine version (``engines/drafter``: configs, safetensors headers, the d2t map and the engine's
own source, read on the host; an error blocks unless ``[speculative] allow`` names its code); the
engine's own argument parser accepts the exact server flags (no weights loaded); the patch set
applies (or is applied), every touched file compiles and every patched module imports. The slow
checks run concurrently. The two slowest answers (host facts, the argument check) come from
``engines/preflight_cache`` when nothing they depend on has changed, and their lines say so.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from servelab.engines.adapters.base import get_adapter
from servelab.engines.preflight import cache as preflight_cache
from servelab.engines.catalog.folder import Catalog
from servelab.engines.drafter.facts import FactsError
from servelab.engines.drafter.findings import Finding
from servelab.engines.drafter.run import DrafterReport, check_drafter
from servelab.engines.errors import ServelabError
from servelab.engines.catalog.experiment import SourcedExperiment
from servelab.engines.helpers import HelperError, helper_script, last_json, last_line, run_helper, run_script
from servelab.engines.hosts.base import Host, HostUnreachable
from servelab.engines.hosts.hostsfile import HostConfig
from servelab.engines.catalog.patches import PatchReport, apply_patches, check_patches, load_patch_set
from servelab.engines.placements.base import placement_for

#: The checks, in the order a report lists them.
CHECK_NAMES: tuple[str, ...] = (
    "host reachable",
    "engine python",
    "engine versions",
    "model path",
    "drafter path",
    "engine arguments",
    "patch set",
)
#: vLLM's parser plus its engine config take ~7 s idle and ~40 s on a loaded 2-core machine.
VALIDATE_TIMEOUT = 240.0


@dataclass(frozen=True)
class Check:
    """One preflight line."""

    name: str
    ok: bool
    detail: str
    seconds: float
    skipped: bool = False
    #: The drafter check's findings, one line each under the check.
    findings: tuple[Finding, ...] = ()
    #: The answer came from the preflight cache (same inputs, by hash).
    cached: bool = False
    #: Passed, but with something the user should know (e.g. a value the engine silently changes).
    warnings: tuple[str, ...] = ()

    @property
    def reason(self) -> str:
        return self.detail

    def line(self) -> str:
        mark = "SKIP" if self.skipped else ("FAIL" if not self.ok else ("WARN" if self.warnings else "PASS"))
        head = f"{mark}  {self.name:<17} {self.detail}  ({self.seconds:.1f} s)"
        return "\n".join([head, *(f"      {f.line()}" for f in self.findings)])


@dataclass(frozen=True)
class HostInfo:
    """What the hostinfo helper read on the host with the engine's interpreter."""

    python: str
    executable: str
    package: str
    version: str | None
    root: str | None
    torch: str | None
    cuda: str | None
    cuda_available: bool
    gpus: int
    gpu_names: tuple[str, ...] = ()
    error: str | None = None
    torch_error: str | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> HostInfo:
        return cls(
            python=str(d.get("python", "?")),
            executable=str(d.get("executable", "?")),
            package=str(d.get("package", "?")),
            version=d.get("version"),
            root=d.get("root"),
            torch=d.get("torch"),
            cuda=d.get("cuda"),
            cuda_available=bool(d.get("cuda_available")),
            gpus=int(d.get("gpus") or 0),
            gpu_names=tuple(d.get("gpu_names") or ()),
            error=d.get("error"),
            torch_error=d.get("torch_error"),
        )


@dataclass
class PreflightReport:
    """Every check of one preflight; behaves as the list of its checks."""

    experiment: str
    host: str
    checks: list[Check] = field(default_factory=list)
    seconds: float = 0.0
    hostinfo: HostInfo | None = None
    patches: PatchReport | None = None
    drafter: DrafterReport | None = None
    #: Where the checks ran when that is not where the engine will ("" on a plain host): a batch
    #: scheduler host's preflight runs on its login node, with its Python, costing no queue time.
    where: str = ""

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def get(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def __iter__(self) -> Iterator[Check]:
        return iter(self.checks)

    def __len__(self) -> int:
        return len(self.checks)

    def __getitem__(self, i: int) -> Check:
        return self.checks[i]

    def summary(self) -> str:
        if self.ok:
            return f"preflight of {self.experiment} on {self.host}{self.where}: all {len(self.checks)} checks passed in {self.seconds:.1f} s"
        bad = [c for c in self.failed() if not c.skipped]
        skipped = sum(c.skipped for c in self.checks)
        counts = f"{len(bad)} of {len(self.checks)} checks failed" + (f", {skipped} skipped" if skipped else "")
        first = bad[0] if bad else self.failed()[0]
        return f"preflight of {self.experiment} on {self.host}{self.where}: {counts} in {self.seconds:.1f} s (first: {first.name}: {first.detail})"


async def read_hostinfo(host: Host, python: str, package: str, timeout: float = 120.0) -> HostInfo:
    """Engine/torch/CUDA versions, GPU count and the engine's package root, read on the host."""
    return HostInfo.from_json(await run_helper(host, python, "hostinfo.py", package, timeout=timeout))


def _resolve(catalog: Catalog, exp: SourcedExperiment | str, host: Host | HostConfig | str | None) -> tuple[SourcedExperiment, Host]:
    sourced = catalog.get(exp) if isinstance(exp, str) else exp
    if isinstance(host, Host):
        return sourced, host
    from servelab.engines.hosts.registry import open_host

    cfg = host if isinstance(host, HostConfig) else catalog.host(host or sourced.experiment.host)
    return sourced, open_host(cfg)


async def run_preflight(
    catalog: Catalog,
    exp: SourcedExperiment | str,
    host: Host | HostConfig | str | None = None,
    *,
    progress: Callable[[Check], None] | None = None,
    package_root: str | None = None,
    imports: bool = True,
    apply: bool = False,
) -> PreflightReport:
    """Run every check of ``exp`` on ``host`` (default: its own host); ``progress`` sees each check as it ends.

    ``package_root`` overrides where the patch set is checked (default: the folder holding the
    engine's package, as the host's interpreter finds it). With ``apply`` (what a launch wants), a
    patch set that passed its check is then applied, all or nothing, and ``report.patches`` is the
    apply's report, whose ``record()`` the run stores.
    """
    sourced, h = _resolve(catalog, exp, host)
    e = sourced.experiment
    cfg = h.config
    adapter = get_adapter(e.engine)
    python = cfg.python
    report = PreflightReport(experiment=sourced.name, host=h.name)
    report.where = placement_for(cfg).preflight_where
    started = time.monotonic()

    def done(check: Check) -> Check:
        report.checks.append(check)
        if progress is not None:
            progress(check)
        return check

    marks: dict[str, tuple[tuple[Finding, ...], bool]] = {}  # check name -> (findings, cached)

    async def timed(name: str, work: Callable[[], Awaitable[tuple[bool, str] | tuple[bool, str, tuple[str, ...]]]]) -> Check:
        t0 = time.monotonic()
        warnings: tuple[str, ...] = ()
        try:
            result = await work()
            ok, detail = result[0], result[1]
            if len(result) == 3:
                warnings = result[2]
        except HostUnreachable as exc:
            ok, detail = False, str(exc)
        except (HelperError, ServelabError) as exc:
            ok, detail = False, str(exc)
        except (TimeoutError, asyncio.TimeoutError):
            ok, detail = False, "timed out"
        except Exception as exc:  # a check that breaks is a failed line, never a traceback
            ok, detail = False, " ".join(f"{type(exc).__name__}: {exc}".split())
        findings, cached = marks.get(name, ((), False))
        return done(Check(name, ok, detail, time.monotonic() - t0, findings=findings, cached=cached, warnings=warnings))

    def skip(names: list[str], why: str) -> None:
        for name in names:
            done(Check(name, False, f"skipped: {why}", 0.0, skipped=True))

    # 1. The host answers.
    async def reachable() -> tuple[bool, str]:
        r = await h.run(["uname", "-n"], timeout=cfg.connect_timeout + 20)
        return (r.ok, f"{r.text().strip() or h.name}" if r.ok else f"uname failed: {last_line(r.stderr)}")

    first = await timed("host reachable", reachable)
    if not first.ok:
        skip(list(CHECK_NAMES[1:]), "host unreachable")
        return _finish(report, started)

    # 2. The engine's interpreter runs.
    async def python_runs() -> tuple[bool, str]:
        r = await h.run([python, "-c", "import platform, sys; print(platform.python_version(), sys.executable)"], timeout=60)
        if not r.ok:
            return False, f"cannot run {python}: {last_line(r.stderr) or f'exit code {r.exit_code}'}"
        return True, f"Python {r.text().strip()}"

    second = await timed("engine python", python_runs)
    if not second.ok:
        skip(list(CHECK_NAMES[2:]), "the engine's python does not run")
        return _finish(report, started)

    # Where the engine is and which version, without importing it: the cache keys and the drafter rules need it.
    quick_task = asyncio.create_task(run_helper(h, python, "hostinfo.py", adapter.package, "--quick", timeout=60))

    # 3-4. Paths are cheap: check them first; versions, arguments and patches run concurrently.
    model = catalog.host_path(sourced, e.model, cfg)
    draft = catalog.host_path(sourced, e.speculative.draft_model, cfg) if e.speculative.draft_model else None

    async def folder(path: str) -> tuple[bool, str]:
        if not await h.exists(path):
            relative = "" if cfg.is_local or path.startswith("/") else " (a relative path: over SSH it is taken from the login directory, not from the experiments folder)"
            return False, f"{path} does not exist on {h.name}{relative}"
        if not await h.exists(f"{path.rstrip('/')}/config.json"):
            return False, f"{path} has no config.json (not a model folder)"
        return True, path

    model_check = await timed("model path", lambda: folder(model))
    if draft is None:
        why = "no speculation" if e.speculative.method == "none" else f"{e.speculative.method} needs no drafter"
        done(Check("drafter path", True, why, 0.0))

    async def quick() -> dict[str, Any]:
        try:
            return await quick_task
        except (HelperError, HostUnreachable, TimeoutError, asyncio.TimeoutError):
            return {}

    async def hostinfo() -> tuple[HostInfo, bool]:
        facts = await quick()
        key = preflight_cache.digest("hostinfo", python, adapter.package, facts, cfg.gpu_ids) if facts.get("root") else None
        hit = preflight_cache.get("hostinfo", key) if key else None
        if hit is not None:
            return HostInfo.from_json(hit.value), True
        raw = await run_helper(h, python, "hostinfo.py", adapter.package, timeout=120.0)
        info = HostInfo.from_json(raw)
        if key and info.torch is not None and info.root is not None:
            preflight_cache.put("hostinfo", key, raw)
        return info, False

    info_task = asyncio.create_task(hostinfo())

    async def versions() -> tuple[bool, str]:
        info, cached = await info_task
        report.hostinfo = info
        if cached:
            marks["engine versions"] = ((), True)
        if info.version is None and info.root is None:
            return False, info.error or f"{adapter.package} is not installed for {python}"
        cuda = f"CUDA {info.cuda}" if info.cuda else "CPU build (no CUDA)"
        gpus = f"{info.gpus} GPU(s)" + (f" ({info.gpu_names[0]})" if info.gpu_names else "")
        detail = f"{adapter.package} {info.version or '?'}, torch {info.torch or 'missing'}, {cuda}, {gpus}"
        if info.torch is None:
            return False, f"{detail}: torch does not import: {info.torch_error}"
        need = e.parallel.gpus
        usable = len(cfg.gpu_ids) if cfg.gpu_ids is not None else info.gpus
        if info.cuda and min(usable, info.gpus) < need:
            return False, f"{detail}: the experiment needs {need} GPU(s), {min(usable, info.gpus)} usable"
        return True, detail + (" (cached: same interpreter, engine and torch versions, GPU devices)" if cached else "")

    async def drafter_checks() -> tuple[bool, str]:
        """The drafter folder, then whether it fits the target on this engine (engines/drafter)."""
        if draft is None:
            return True, "no drafter"
        ok, detail = await folder(draft)
        if not ok:
            return ok, detail
        if not model_check.ok:
            return True, f"{draft} (drafter checks skipped: the model folder is missing)"
        facts = await quick()
        max_len = e.engine_args.get(adapter.max_len_arg)
        try:
            rep = await check_drafter(
                h, adapter, python=python, method=e.speculative.method, draft_path=draft, target_path=model,
                max_model_len=max_len if isinstance(max_len, int) and not isinstance(max_len, bool) else None,
                num_tokens=e.speculative.num_tokens,
                patched_files=patched_files(load_patch_set(sourced)),
                package_root=facts.get("root"), version=facts.get("version"),
            )
        except FactsError as exc:
            return False, str(exc)
        report.drafter = rep
        allow = e.speculative.allow
        marks["drafter path"] = (tuple(rep.findings), False)
        bad = rep.blocking(allow)
        if bad:
            return False, f"{bad[0].code}: {bad[0].message}" + (f" (+{len(bad) - 1} more error(s))" if len(bad) > 1 else "")
        return True, f"{draft}: {rep.summary(allow)}" + (f"; rules {rep.rules.source}" if rep.rules else "")

    async def arguments() -> tuple[bool, str, tuple[str, ...]]:
        if not model_check.ok:
            return False, "skipped: the model folder is missing (the parser reads its config.json)", ()
        v = adapter.validation(e, model, draft)
        env = catalog.launch_spec(sourced, cfg).env  # the server's own environment can change its parsing
        request = v.request(adapter.name)
        argv = helper_script("validate_args.py").argv(cfg, python)  # names the frame's content hash
        facts = await quick()
        key = None
        if facts.get("root"):
            folders = [await preflight_cache.folder_digest(h, p) for p in (model, draft)]
            patch_hashes = [p.sha256 for p in load_patch_set(sourced)]
            key = preflight_cache.digest("engine-args", argv, request, env, facts, folders, patch_hashes)
            hit = preflight_cache.get("engine-args", key)
            if hit is not None:
                marks["engine arguments"] = ((), True)
                flags = sum(1 for word in v.flags if word.startswith("--"))
                cached_warnings = tuple(str(w) for w in hit.value.get("warnings") or ())
                return True, (
                    f"{flags} flags accepted by {v.label}" + "".join(f"; warning: {w}" for w in cached_warnings)
                    + f" (cached {hit.age()} ago: same flags, engine, patches and model/drafter files)"
                ), cached_warnings
        r = await run_script(h, python, "validate_args.py", input=json.dumps(request).encode(), env=env, timeout=VALIDATE_TIMEOUT)
        answer = last_json(r)
        if answer is None:
            return False, f"argument check crashed: {last_line(r.stderr) or f'exit code {r.exit_code}'}", ()
        warnings = tuple(str(w) for w in answer.get("warnings") or ())
        if answer.get("ok"):
            if key is not None:
                preflight_cache.put("engine-args", key, answer)
            # flags, not argv words (``--port 8000`` is one); the check's line carries the one timing
            flags = sum(1 for word in v.flags if word.startswith("--"))
            return True, f"{flags} flags accepted by {v.label}" + "".join(f"; warning: {w}" for w in warnings), warnings
        message = str(answer.get("message"))
        if answer.get("by") == "servelab" and answer.get("stage") == "servelab":
            message = f"servelab: {message} ({v.label} accept it)"
        elif answer.get("stage") in ("import", "select"):
            message += f" ({answer['stage']})"
        return False, message, warnings

    async def patch_set() -> tuple[bool, str]:
        patches = load_patch_set(sourced)
        if not patches:
            return True, "no patches"
        root = package_root
        if root is None:
            root = (await quick()).get("root") or (await info_task)[0].root
            if root is None:
                return False, f"cannot find {adapter.package}'s package root on {h.name}"
        rep = await check_patches(h, patches, root, python=python, imports=imports)
        report.patches = rep
        if rep.compile_errors:
            c = rep.compile_errors[0]
            return False, f"{root.rstrip('/')}/{c.path}:{c.line}: SyntaxError: {c.message}: {c.text}"
        if not rep.ok:
            return False, rep.error or "patch check failed"
        if apply:
            rep = await apply_patches(h, patches, root, python=python, imports=False)  # imported just above
            report.patches = rep
            if not rep.ok:
                return False, f"apply failed, nothing changed: {rep.error}"
            return True, f"{rep.summary()} under {root}" + (" (applied now)" if rep.changed else "")
        return True, f"{rep.summary()} under {root}"

    await asyncio.gather(
        timed("drafter path", drafter_checks) if draft is not None else asyncio.sleep(0),
        timed("engine versions", versions),
        timed("engine arguments", arguments),
        timed("patch set", patch_set),
    )
    return _finish(report, started)


def patched_files(patches: list[Any]) -> frozenset[str]:
    """Files (relative to the folder holding the engine's package) that a patch set changes."""
    out: set[str] = set()
    for p in patches:
        for line in p.data.decode("utf-8", "replace").splitlines():
            if line.startswith("+++ ") and not line.startswith("+++ /dev/null"):
                path = line[4:].split("\t")[0].strip()
                out.add(path.split("/", 1)[1] if path.startswith(("a/", "b/")) else path)
    return frozenset(out)


def _finish(report: PreflightReport, started: float) -> PreflightReport:
    order = {name: i for i, name in enumerate(CHECK_NAMES)}
    report.checks.sort(key=lambda c: order.get(c.name, len(order)))
    report.seconds = time.monotonic() - started
    return report
