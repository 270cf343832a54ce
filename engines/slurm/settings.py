"""A Slurm host's ``[hosts.NAME.slurm]`` table: how jobs are submitted to the cluster, and what the
core asks of the kind when it reads a definition (Slurm picks a multi-node job's nodes; each rank's
command carries an address token the job script fills in)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: Slurm's time formats: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
SLURM_TIME_RE = re.compile(r"^(\d+-\d{1,2}(:\d{1,2}){0,2}|\d+(:\d{1,2}){0,2})$")
#: An extra ``#SBATCH`` line: one option, no newline (it becomes one line of the job script).
SBATCH_OPTION_RE = re.compile(r"^--?[A-Za-z][A-Za-z0-9-]*(=[^\n\r]*)?$")
#: Address tokens the adapters render node plans with; the job script puts the real addresses there.
HEAD_TOKEN = "servelab-slurm-head-address"
NODE_TOKEN = "servelab-slurm-node-address"


class SlurmSettings(BaseModel):
    """One ``[hosts.NAME.slurm]`` table: how jobs are submitted to a Slurm cluster."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    picks_nodes: ClassVar[bool] = True

    partition: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")]
    account: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")] | None = None
    qos: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")] | None = None
    gpus_per_node: Annotated[int, Field(ge=0, le=64)] = 0
    #: ``#SBATCH --time``, in one of Slurm's formats ("30", "01:00:00", "1-00:00:00").
    time_limit: str = "01:00:00"
    #: More ``#SBATCH`` lines, one option each ("--exclusive", "--constraint=h100").
    sbatch: list[str] = Field(default_factory=list)
    #: ``$SLURM_CONF`` for the client commands on the login node (None: the cluster's default).
    conf: Annotated[str, Field(min_length=1)] | None = None

    @field_validator("time_limit")
    @classmethod
    def _time(cls, value: str) -> str:
        if not SLURM_TIME_RE.match(value):
            raise ValueError(f"time_limit {value!r} is not a Slurm time (minutes, HH:MM:SS or D-HH:MM:SS)")
        return value

    @field_validator("sbatch")
    @classmethod
    def _lines(cls, value: list[str]) -> list[str]:
        for line in value:
            if not SBATCH_OPTION_RE.match(line):
                raise ValueError(f"sbatch line {line!r} is not one option (write it as '--name=value', without '#SBATCH')")
        return value

    # -- what the core asks of the kind (engines.hosts.kinds.KindTable) --------------------------
    def host_problem(self, gpus: object) -> str | None:
        return "a Slurm host's GPUs are Slurm's to give: set slurm.gpus_per_node, not gpus" if gpus is not None else None

    def resolved(self, base: Path) -> SlurmSettings:
        if self.conf is None or self.conf.startswith("/"):
            return self
        return self.model_copy(update={"conf": os.path.normpath(os.path.abspath(base / Path(self.conf).expanduser()))})

    def rank_address(self, rank: int, shared: bool) -> str:
        return HEAD_TOKEN if rank == 0 or shared else NODE_TOKEN

    def backend_problem(self, backend: str) -> str | None:
        if backend == "native":
            return None
        return "on a Slurm host only the native backend is supported (one srun task per node; Ray under srun is not built)"


TABLE = SlurmSettings
