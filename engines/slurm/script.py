"""The batch script servelab submits for a run on a Slurm host.

It starts the engine with exactly the argv and environment a plain host's run would have (the run's
``LaunchSpec``, plus the ``SERVELAB_RUN_ID`` marker), in the run's folder on the shared filesystem,
its stdout and stderr appended to the run's ``engine.log``, and records the engine's exit code in
``exit_code`` when it ends on its own. Every value is quoted with ``shlex.quote``: nothing from a
TOML file is ever read by the shell as anything but one word. ``#SBATCH`` lines carry the host's
partition, account, QOS, GPUs per node, time limit and extra lines (one option each, checked in
``hostsfile.SlurmSettings``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

from servelab.engines.hostsfile import SlurmSettings

MARKER = "SERVELAB_RUN_ID"
SCRIPT_NAME = "job.sbatch"
#: Slurm's own output of the batch step (the script's stderr before the engine starts, Slurm's notes).
SLURM_OUT = "slurm-%j.out"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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
) -> str:
    """The job script, as text (``servelab show`` prints it; launch writes it to the run folder)."""
    q = shlex.quote
    sb = [
        f"--job-name={job_name(run_id)}",
        f"--partition={settings.partition}",
        "--nodes=1",
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
    for key, value in env.items():
        if not _ENV_NAME.match(key):
            raise ValueError(f"environment name {key!r} is not a shell variable name")
        lines.append(f"export {key}={q(value)}")
    lines += [
        f"{' '.join(q(a) for a in argv)} < /dev/null >> {q(log_name)} 2>&1",
        "code=$?",
        f"printf '%d\\n' \"$code\" > {q(exit_name)}",
        'exit "$code"',
        "",
    ]
    return "\n".join(lines)
