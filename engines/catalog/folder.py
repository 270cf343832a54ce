"""The experiments folder: every definition, hosts.toml, and the checks that span files.

Loading never raises on a bad file: each file yields either an experiment or its problems, so one
broken definition never hides the others.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from servelab.engines.adapters.base import ENGINE_MODULES, get_adapter
from servelab.engines.adapters.exchange import LaunchSpec, NodeAddress, NodePlan, NodeTarget
from servelab.engines.errors import Problem, ServelabError
from servelab.engines.catalog.experiment import Experiment, SourcedExperiment, split_host_port
from servelab.engines.hosts.hostsfile import LOCAL, HostConfig, HostsFile
from servelab.engines.hosts.kinds import node_picking_titles, title
from servelab.engines.catalog.loader import display_path, load_model, locate, parse_toml

HOSTS_FILE = "hosts.toml"
#: Where the command line looks when ``--dir`` is not given.
ENV_DIR = "SERVELAB_EXPERIMENTS"


def default_dir() -> Path:
    """``$SERVELAB_EXPERIMENTS``, else ``./experiments``."""
    return Path(os.environ.get(ENV_DIR) or "experiments")


@dataclass
class FileEntry:
    """One TOML file of the folder: its experiment, or why it has none."""

    path: Path
    shown: str
    experiment: SourcedExperiment | None = None
    problems: list[Problem] = field(default_factory=list)
    #: What will likely fail later (at preflight or launch) but does not make the definition invalid.
    warnings: list[Problem] = field(default_factory=list)


@dataclass
class Catalog:
    """Everything loaded from one experiments folder."""

    folder: Path
    hosts: HostsFile
    entries: list[FileEntry]
    folder_problems: list[Problem] = field(default_factory=list)
    #: Warnings about hosts.toml (a local host's python that does not exist...).
    folder_warnings: list[Problem] = field(default_factory=list)

    # -- look-ups -----------------------------------------------------------------------------
    @property
    def experiments(self) -> list[SourcedExperiment]:
        return [e.experiment for e in self.entries if e.experiment is not None]

    def warnings(self, names: list[str] | None = None) -> list[Problem]:
        """hosts.toml's warnings and those of every (or the named) experiment."""
        out = list(self.folder_warnings)
        for entry in self.entries:
            exp = entry.experiment
            if not names or entry.path.stem in names or (exp is not None and exp.name in names):
                out.extend(entry.warnings)
        return sorted(set(out))

    def problems(self) -> list[Problem]:
        out = list(self.folder_problems)
        for entry in self.entries:
            out.extend(entry.problems)
        return out

    def get(self, name: str) -> SourcedExperiment:
        """An experiment by name (or by file stem / path), else a one-line error."""
        for exp in self.experiments:
            if exp.name == name or exp.path.stem == name or str(exp.path) == name:
                return exp
        for entry in self.entries:
            if entry.path.stem == name and entry.problems:
                raise ServelabError(f"{name}: definition is invalid: {entry.problems[0]}")
        known = ", ".join(sorted(e.name for e in self.experiments)) or "none"
        raise ServelabError(f"no experiment named {name!r} in {self.folder} (known: {known})")

    def host(self, name: str) -> HostConfig:
        cfg = self.hosts.get(name)
        if cfg is None:
            raise ServelabError(f"no host named {name!r} in {self.folder / HOSTS_FILE} (known: {', '.join(self.hosts.names())})")
        return cfg.model_copy(update={"name": name}).resolved(self.folder)

    def host_path(self, exp: SourcedExperiment, value: str, host: HostConfig | None = None) -> str:
        """A model/drafter path as the host sees it: relative paths are relative to the folder on a local host."""
        host = host or self.host(exp.experiment.host)
        if not host.is_local:
            return value  # a remote host's paths are its own: kept verbatim
        p = Path(value).expanduser()
        if not p.is_absolute() and ("/" in value or value.startswith(".")):
            return str((exp.folder / p).resolve())
        return str(p)

    def launch_spec(self, exp: SourcedExperiment, host: HostConfig | None = None) -> LaunchSpec:
        """The exact argv and env of an experiment on its host."""
        host = host or self.host(exp.experiment.host)
        e = exp.experiment
        draft = self.host_path(exp, e.speculative.draft_model, host) if e.speculative.draft_model else None
        spec = get_adapter(e.engine).launch_spec(e, host.python, self.host_path(exp, e.model, host), draft)
        if host.gpu_ids is not None and "CUDA_VISIBLE_DEVICES" not in spec.env:
            env = dict(spec.env)
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in host.gpu_ids)
            return LaunchSpec(spec.argv, env)
        return spec

    def node_plans(self, exp: SourcedExperiment, *, shared: bool = False) -> list[NodePlan]:
        """Each node's processes for a multi-node experiment (empty for a single host).

        On one host whose scheduler picks the nodes (``[multinode] nodes = N``) each rank's address
        is the one its kind's table gives (a job script's token, filled in on the node), the head's
        for every rank with ``shared`` (nodes at the head's address)."""
        e = exp.experiment
        if e.multinode is None:
            return []
        if not e.spans_hosts:
            return self._scheduled_plans(exp, shared)
        targets: list[NodeTarget] = []
        for rank, name in enumerate(e.nodes):
            host = self.host(name)
            draft = self.host_path(exp, e.speculative.draft_model, host) if e.speculative.draft_model else None
            targets.append(NodeTarget(NodeAddress(rank, name, reach_address(host)), host.python, self.host_path(exp, e.model, host), draft))
        return get_adapter(e.engine).node_plans(e, targets)

    def _scheduled_plans(self, exp: SourcedExperiment, shared: bool) -> list[NodePlan]:
        e = exp.experiment
        host = self.host(e.host)
        table = host.table
        if table is None or not table.picks_nodes:
            return []  # the check refuses it (its nodes are named, not picked)
        draft = self.host_path(exp, e.speculative.draft_model, host) if e.speculative.draft_model else None
        model = self.host_path(exp, e.model, host)
        targets = [NodeTarget(NodeAddress(rank, e.host, table.rank_address(rank, shared)), host.python, model, draft) for rank in range(e.node_count)]
        return get_adapter(e.engine).node_plans(e, targets)

    def baseline_of(self, exp: SourcedExperiment) -> SourcedExperiment | None:
        if not exp.experiment.baseline:
            return None
        for other in self.experiments:
            if other.name == exp.experiment.baseline:
                return other
        return None


def _load_hosts(folder: Path) -> tuple[HostsFile, list[Problem]]:
    path = folder / HOSTS_FILE
    if not path.exists():
        return HostsFile(), []
    shown = display_path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        return HostsFile(), [Problem(shown, 1, "<file>", f"cannot read: {exc.strerror}")]
    parsed, text, problems = parse_toml(data, shown)
    if parsed is None:
        return HostsFile(), problems
    hosts, problems = load_model(HostsFile, parsed, text, shown)
    return hosts or HostsFile(), problems


def load_file(path: Path, shown: str | None = None) -> FileEntry:
    """Load one definition file. The name defaults to the file stem."""
    shown = shown or display_path(path)
    entry = FileEntry(path=path, shown=shown)
    try:
        data = path.read_bytes()
    except OSError as exc:
        entry.problems.append(Problem(shown, 1, "<file>", f"cannot read: {exc.strerror or exc}"))
        return entry
    parsed, text, problems = parse_toml(data, shown)
    if parsed is None:
        entry.problems = problems
        return entry
    parsed.setdefault("name", path.stem)
    if "engine" in parsed and isinstance(parsed["engine"], str) and parsed["engine"] not in ENGINE_MODULES:
        entry.problems.append(
            Problem(shown, locate(text, ("engine",)), "engine", f"unknown engine {parsed['engine']!r} (known: {', '.join(sorted(ENGINE_MODULES))})")
        )
        return entry
    exp, problems = load_model(Experiment, parsed, text, shown)
    if exp is None:
        entry.problems = problems
        return entry
    sourced = SourcedExperiment(experiment=exp, path=path, text=text)
    entry.experiment = sourced
    for bad in get_adapter(exp.engine).problems(exp):
        entry.problems.append(Problem(shown, locate(text, tuple(bad.path.split("."))), bad.path, f"{exp.engine}: {bad.message}"))
    for i, (patch, digest) in enumerate(sourced.patch_hashes()):
        if digest is None:
            entry.problems.append(Problem(shown, locate(text, ("patches", i, "file")), f"patches[{i}].file", f"patch file not found: {sourced.patch_path(patch)}"))
    return entry


def load_catalog(folder: Path | str | None = None, only: list[str] | None = None) -> Catalog:
    """Load a folder of definitions. ``only`` limits file-level checks to those names/stems/paths."""
    folder = Path(folder) if folder is not None else default_dir()
    if not folder.is_dir():
        raise ServelabError(f"experiments folder not found: {folder}")
    hosts, host_problems = _load_hosts(folder)
    files = sorted(p for p in folder.glob("*.toml") if p.name != HOSTS_FILE)
    entries = [load_file(p) for p in files]
    cat = Catalog(folder=folder, hosts=hosts, entries=entries, folder_problems=host_problems)
    _cross_check(cat)
    _path_warnings(cat)
    return cat


def _path_warnings(cat: Catalog) -> None:
    """Paths that resolve to nothing usable on their host: warnings, since only the host can be sure."""
    hosts_text = ""
    hosts_path = cat.folder / HOSTS_FILE
    if hosts_path.is_file():
        try:
            hosts_text = hosts_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            hosts_text = ""
    shown = display_path(hosts_path)
    for name in cat.hosts.hosts:
        cfg = cat.host(name)
        if not cfg.is_local:
            continue
        raw = cat.hosts.hosts[name].python
        line = locate(hosts_text, ("hosts", name, "python"))
        if "/" in cfg.python:
            if not os.path.exists(cfg.python):
                rel = f" ({raw!r} is relative to {display_path(cat.folder)})" if not Path(raw).expanduser().is_absolute() else ""
                cat.folder_warnings.append(
                    Problem(shown, line, f"hosts.{name}.python", f"{cfg.python} does not exist on this machine{rel}: a launch on {name} would fail")
                )
        elif shutil.which(cfg.python) is None:
            cat.folder_warnings.append(Problem(shown, line, f"hosts.{name}.python", f"{raw!r} is not on PATH: a launch on {name} would fail"))
    for entry in cat.entries:
        exp = entry.experiment
        if exp is None or cat.hosts.get(exp.experiment.host) is None:
            continue
        cfg = cat.host(exp.experiment.host)
        if cfg.is_local:
            continue
        e = exp.experiment
        for key, value in (("model", e.model), ("speculative.draft_model", e.speculative.draft_model)):
            if value and not value.startswith("/"):
                entry.warnings.append(
                    Problem(
                        entry.shown,
                        locate(exp.text, tuple(key.split("."))),
                        key,
                        f"{value!r} is relative, and host {cfg.name} is reached over SSH ({cfg.ssh}): there it is not taken "
                        f"from this folder but from the SSH login directory (preflight's checks) and from the run's folder "
                        f"{host_workdir_of(cfg)}/runs/<run> (the engine's working directory); give the path as {cfg.name} sees it, from /",
                    )
                )


def host_workdir_of(cfg: HostConfig) -> str:
    """The workdir as written, for messages (``~/x`` stays ``~/x``)."""
    return cfg.workdir.rstrip("/") or "/"


def _cross_check(cat: Catalog) -> None:
    """Checks that need the whole folder: unique names, hosts, baselines."""
    seen: dict[str, FileEntry] = {}
    by_name = {e.experiment.name: e for e in cat.entries if e.experiment is not None}
    for entry in cat.entries:
        exp = entry.experiment
        if exp is None:
            continue
        e = exp.experiment
        if e.name in seen:
            first = seen[e.name]
            entry.problems.append(Problem(entry.shown, locate(exp.text, ("name",)), "name", f"duplicate name {e.name!r} (also in {first.shown})"))
        else:
            seen[e.name] = entry
        if not e.hosts and cat.hosts.get(e.host) is None:
            entry.problems.append(
                Problem(entry.shown, locate(exp.text, ("host",)), "host", f"unknown host {e.host!r} (hosts.toml has: {', '.join(cat.hosts.names())})")
            )
        entry.problems.extend(_node_problems(cat, entry, exp))
        if e.baseline is not None:
            base = by_name.get(e.baseline)
            line = locate(exp.text, ("baseline",))
            if e.baseline == e.name:
                entry.problems.append(Problem(entry.shown, line, "baseline", "an experiment cannot be its own baseline"))
            elif base is None or base.experiment is None:
                entry.problems.append(Problem(entry.shown, line, "baseline", f"baseline {e.baseline!r} is not an experiment in this folder"))
            else:
                differs = _other_model(cat, base.experiment, exp)
                if differs:
                    entry.problems.append(Problem(entry.shown, line, "baseline", f"baseline {e.baseline!r} runs another model: {differs}"))


def _other_model(cat: Catalog, base: SourcedExperiment, exp: SourcedExperiment) -> str:
    """"" when both run the same model, the paths resolved for each one's host; else both, as their hosts see them."""

    def resolved(x: SourcedExperiment) -> tuple[str, str]:
        host = x.experiment.host
        if cat.hosts.get(host) is None:
            return x.experiment.model, host
        cfg = cat.host(host)
        path = cat.host_path(x, x.experiment.model, cfg)
        return (os.path.normpath(path) if "/" in path else path), host

    (b, bh), (m, mh) = resolved(base), resolved(exp)
    if b == m:
        return ""

    def said(x: SourcedExperiment, path: str, host: str) -> str:
        raw = x.experiment.model
        return f"{path} on {host}" + (f" (from {raw!r})" if raw != path else "")

    return f"{said(base, b, bh)}, this one {said(exp, m, mh)}"


def _node_problems(cat: Catalog, entry: FileEntry, exp: SourcedExperiment) -> list[Problem]:
    """A multi-node experiment's hosts exist, and its parallel sizes fit their GPUs."""
    e = exp.experiment
    if not e.hosts:
        return _scheduled_node_problems(cat, entry, exp)
    out: list[Problem] = []
    line = locate(exp.text, ("hosts",))
    configs = []
    for i, name in enumerate(e.hosts):
        cfg = cat.hosts.get(name)
        if cfg is None:
            out.append(Problem(entry.shown, line, f"hosts[{i}]", f"unknown host {name!r} (hosts.toml has: {', '.join(cat.hosts.names())})"))
        else:
            configs.append(cfg)
            if cfg.table is not None and cfg.table.picks_nodes:  # one job over nodes its scheduler picks, not a run per host
                t = title(cfg.kind)
                out.append(Problem(entry.shown, line, f"hosts[{i}]", f'{name} is a {t} host: {t} picks its nodes (write host = "{name}" and [multinode] nodes = N); a {t} host among other hosts is not supported'))
    if len(configs) == len(e.hosts) and e.multinode is not None:
        out.extend(_loopback_head(entry, exp, configs, line))
    world, n = e.parallel.gpus, len(e.hosts)
    pline = locate(exp.text, ("parallel",))
    if world % n:
        out.append(Problem(entry.shown, pline, "parallel", f"tensor x pipeline x data = {world} GPUs does not split evenly over {n} nodes"))
    elif len(configs) == n:
        short = [f"{name} has {len(c.gpu_ids or [])}" for c, name in zip(configs, e.hosts) if c.gpu_ids is not None and len(c.gpu_ids) < world // n]
        if short:
            out.append(Problem(entry.shown, pline, "parallel", f"{world} GPUs over {n} nodes needs {world // n} per node ({'; '.join(short)} in hosts.toml)"))
    return out


def _scheduled_node_problems(cat: Catalog, entry: FileEntry, exp: SourcedExperiment) -> list[Problem]:
    """``[multinode] nodes = N`` on one host: a host whose scheduler picks nodes, a backend it runs, sizes that split."""
    e = exp.experiment
    if e.multinode is None or e.multinode.nodes is None:
        return []
    line = locate(exp.text, ("multinode", "nodes"))
    cfg = cat.hosts.get(e.host)
    table = cfg.table if cfg is not None else None
    if cfg is not None and (table is None or not table.picks_nodes):
        return [Problem(entry.shown, line, "multinode.nodes", f'{e.host} is not a {node_picking_titles()} host: name the nodes instead (hosts = ["{e.host}", ...])')]
    out: list[Problem] = []
    if table is not None and (why := table.backend_problem(e.multinode.backend)) is not None:
        out.append(Problem(entry.shown, locate(exp.text, ("multinode", "backend")), "multinode.backend", why))
    if e.parallel.gpus % e.multinode.nodes:
        out.append(Problem(entry.shown, locate(exp.text, ("parallel",)), "parallel", f"tensor x pipeline x data = {e.parallel.gpus} GPUs does not split evenly over {e.multinode.nodes} nodes"))
    return out


def reach_address(host: HostConfig) -> str:
    """The address other nodes reach ``host`` at: its ``address``, else for an SSH host the HostName
    its ssh_config gives the alias (an alias only ssh knows means nothing to the engines), else
    :attr:`HostConfig.node_address`."""
    if host.address or host.ssh is None:
        return host.node_address
    from servelab.engines.hosts.ssh import config_paths
    from servelab.engines.hosts.sshconfig import resolve_target

    target = resolve_target(host.ssh, config_paths())
    return target.hostname if target.is_alias else host.node_address


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _loopback_head(entry: FileEntry, exp: SourcedExperiment, configs: list[HostConfig], line: int) -> list[Problem]:
    """Nodes on other machines would dial a loopback head address: their own machine, a hang at the join."""
    e = exp.experiment
    assert e.multinode is not None
    head_address = e.multinode.head_address
    dial = split_host_port(head_address)[0] if head_address else reach_address(configs[0])
    away = [name for name, c in zip(e.hosts[1:], configs[1:]) if c.ssh is not None and not _is_loopback(reach_address(c))]
    if not _is_loopback(dial) or not away:
        return []
    itself = "itself" if len(away) == 1 else "themselves"
    if head_address:
        why = "([multinode] head_address): give the head's address on the nodes' network"
    else:
        why = f'(the head, {e.hosts[0]}, has no address in hosts.toml): set address = "<its address on the nodes\' network>" under [hosts.{e.hosts[0]}]'
    return [Problem(entry.shown, line, "hosts", f"{', '.join(away)} would dial the head at {dial}, i.e. {itself} {why}")]


def check(folder: Path | str | None = None, names: list[str] | None = None) -> tuple[Catalog, list[Problem]]:
    """All problems of the folder, or of the named experiments (plus hosts.toml)."""
    cat = load_catalog(folder)
    if not names:
        return cat, sorted(cat.problems())
    wanted: list[Problem] = list(cat.folder_problems)
    for name in names:
        matches = [
            e for e in cat.entries
            if e.path.stem == name or e.path.name == name or str(e.path) == name
            or (e.experiment is not None and e.experiment.name == name)
            or Path(name).resolve() == e.path.resolve()
        ]
        if not matches:
            path = Path(name)
            if path.is_file():
                matches = [load_file(path)]
            else:
                wanted.append(Problem(name, 1, "<file>", "no such experiment or file"))
                continue
        for m in matches:
            wanted.extend(m.problems)
    return cat, sorted(set(wanted))
