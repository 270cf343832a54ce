"""The batch script servelab submits for a run on a Slurm host.

It starts the engine with exactly the argv and environment a plain host's run would have (the run's
``LaunchSpec``, plus the ``SERVELAB_RUN_ID`` marker), in the run's folder on the shared filesystem,
its stdout and stderr appended to the run's ``engine.log``, and records the engine's exit code in
``exit_code`` when it ends on its own. Every value is quoted with ``shlex.quote``: nothing from a
TOML file is ever read by the shell as anything but one word. ``#SBATCH`` lines carry the host's
partition, account, QOS, GPUs per node, time limit and extra lines (one option each, checked in
``settings.SlurmSettings``).

A multi-node experiment (``[multinode] nodes = N`` on a Slurm host) is one job of N nodes whose
script runs ``srun`` with one task per node. Each rank's command is the adapter's own
(``node_plans``), rendered with two address tokens: :data:`HEAD_TOKEN` (the head's address) and
:data:`NODE_TOKEN` (the task's own node). The batch script finds the head (the first host of
``scontrol show hostnames $SLURM_JOB_NODELIST``, at its ``NodeAddr``); each task finds its own
address and picks its command by ``$SLURM_NODEID``, evaluated inside the task (the task body is one
single-quoted word passed to ``bash -c``, so nothing of it is expanded once in the batch script).
A node at the head's own address (several "nodes" on one machine) runs the command the adapter
gives a node sharing the head's address (SGLang's worker then takes ``--port`` + rank).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from servelab.engines.slurm.settings import HEAD_TOKEN as HEAD_TOKEN, NODE_TOKEN as NODE_TOKEN, SlurmSettings
from servelab.engines.adapters.exchange import LaunchSpec

MARKER = "SERVELAB_RUN_ID"
SCRIPT_NAME = "job.sbatch"
#: Slurm's own output of the batch step (the script's stderr before the engine starts, Slurm's notes).
SLURM_OUT = "slurm-%j.out"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: The shell variables holding them (set by the script, never from a TOML value).
_TOKEN_VARS = {HEAD_TOKEN: "SERVELAB_HEAD_ADDR", NODE_TOKEN: "SERVELAB_NODE_ADDR"}
_TOKEN_RE = re.compile("|".join(re.escape(t) for t in _TOKEN_VARS))
#: A task whose ``$SLURM_NODEID`` has no command (the allocation is larger than the plan).
NO_RANK_EXIT = 97


@dataclass(frozen=True)
class RankCommand:
    """One node rank's engine command: ``own`` when the node has an address of its own, ``shared``
    when it is at the head's address (both from the adapter's ``node_plans``)."""

    rank: int
    own: LaunchSpec
    shared: LaunchSpec


def node_log(rank: int, log_name: str = "engine.log") -> str:
    """Rank 0 (the head) writes the run's log; rank k ``engine.n<k>.log`` beside it."""
    stem, dot, ext = log_name.rpartition(".")
    return log_name if rank == 0 else (f"{stem}.n{rank}.{ext}" if dot else f"{log_name}.n{rank}")


def word(value: str) -> str:
    """One shell word for ``value``: ``shlex.quote``d, the address tokens as ``"$VAR"`` expansions."""
    parts: list[str] = []
    pos = 0
    for m in _TOKEN_RE.finditer(value):
        if m.start() > pos:
            parts.append(shlex.quote(value[pos : m.start()]))
        parts.append(f'"${{{_TOKEN_VARS[m.group(0)]}}}"')
        pos = m.end()
    if pos < len(value) or not parts:
        parts.append(shlex.quote(value[pos:]))
    return "".join(parts)


def _checked(env: Mapping[str, str]) -> Mapping[str, str]:
    for key in env:
        if not _ENV_NAME.match(key):
            raise ValueError(f"environment name {key!r} is not a shell variable name")
    return env


def _exports(env: Mapping[str, str]) -> list[str]:
    return [f"export {key}={word(value)}" for key, value in _checked(env).items()]


def _exec(spec: LaunchSpec, log: str) -> str:
    return "; ".join([*_exports(spec.env), f"exec {' '.join(word(a) for a in spec.argv)} < /dev/null >> {shlex.quote(log)} 2>&1"])


#: A node's ``NodeAddr`` (where its ports are reached), its name when Slurm gives none; double
#: quotes only, so the task body (single-quoted as a whole) stays readable.
_ADDR_OF = 'addr_of() { a=$(scontrol show node -o "$1" | tr " " "\\n" | sed -n "s/^NodeAddr=//p"); printf "%s" "${a:-$1}"; }'


def task_body(ranks: Sequence[RankCommand], log_name: str = "engine.log") -> str:
    """What each ``srun`` task runs (``bash -c``): its own address, then its rank's command."""
    lines = [
        "set -u",
        _ADDR_OF,
        'SERVELAB_NODE_ADDR=$(addr_of "$SLURMD_NODENAME")',
        'case "$SLURM_NODEID" in',
    ]
    for r in ranks:
        log = node_log(r.rank, log_name)
        own, shared = _exec(r.own, log), _exec(r.shared, log)
        if r.rank == 0 or own == shared:  # the head is at the head's address
            lines.append(f"  {r.rank}) {shared} ;;")
        else:
            lines.append(f'  {r.rank}) if [ "$SERVELAB_NODE_ADDR" = "$SERVELAB_HEAD_ADDR" ]; then {shared}; else {own}; fi ;;')
    lines += [f"  *) echo \"servelab: no command for node rank $SLURM_NODEID\" >&2; exit {NO_RANK_EXIT} ;;", "esac", ""]
    return "\n".join(lines)


def job_name(run_id: str) -> str:
    return f"servelab-{run_id}"


def render(
    settings: SlurmSettings,
    *,
    run_id: str,
    run_dir: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    log_name: str = "engine.log",
    exit_name: str = "exit_code",
    ranks: Sequence[RankCommand] = (),
) -> str:
    """The job script, as text (``servelab show`` prints it; launch writes it to the run folder).
    ``ranks``: a multi-node experiment's command per node rank (``srun``, one task per node); else
    ``argv``/``env`` run in the batch step itself."""
    q = shlex.quote
    nodes = max(1, len(ranks))
    if ranks and [r.rank for r in ranks] != list(range(len(ranks))):
        raise ValueError("node ranks must be 0..N-1 in order")
    sb = [
        f"--job-name={job_name(run_id)}",
        f"--partition={settings.partition}",
        f"--nodes={nodes}",
        "--ntasks-per-node=1",
        f"--time={settings.time_limit}",
        f"--chdir={run_dir}",
        f"--output={run_dir}/{SLURM_OUT}",
    ]
    if settings.account:
        sb.append(f"--account={settings.account}")
    if settings.qos:
        sb.append(f"--qos={settings.qos}")
    if settings.gpus_per_node:
        sb.append(f"--gpus-per-node={settings.gpus_per_node}")
    sb.extend(settings.sbatch)
    lines = ["#!/bin/bash"]
    # sbatch reads #SBATCH lines itself, without a shell: a value with a space would split there,
    # so such values (a run folder with a space) are refused before rendering.
    for opt in sb:
        if any(c.isspace() for c in opt):
            raise ValueError(f"#SBATCH {opt!r} holds whitespace (sbatch would split it)")
        lines.append(f"#SBATCH {opt}")
    lines += [
        f"# servelab run {run_id}: written by servelab, submitted with sbatch --parsable.",
        "set -u",
        f"cd {q(run_dir)} || exit 1",
        f"export {MARKER}={q(run_id)}",
    ]
    if ranks:
        lines += [
            "# the head: the first host of the allocation, at its NodeAddr",
            _ADDR_OF,
            'SERVELAB_HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            'SERVELAB_HEAD_ADDR=$(addr_of "$SERVELAB_HEAD_NODE")',
            "export SERVELAB_HEAD_NODE SERVELAB_HEAD_ADDR",
            "# each task's own rank and address: the task body is one word, expanded inside each task",
            f"task={q(task_body(ranks, log_name))}",
            f"srun --nodes={nodes} --ntasks={nodes} --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c \"$task\" < /dev/null",
        ]
    else:
        lines += [*(f"export {key}={q(value)}" for key, value in _checked(env).items()), f"{' '.join(q(a) for a in argv)} < /dev/null >> {q(log_name)} 2>&1"]
    lines += [
        "code=$?",
        f"printf '%d\\n' \"$code\" > {q(exit_name)}",
        'exit "$code"',
        "",
    ]
    return "\n".join(lines)
