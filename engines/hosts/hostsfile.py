"""``experiments/hosts.toml``: where engines run.

A host without ``ssh`` is this machine. The host named ``local`` always exists; hosts.toml may
override its interpreter and work directory. Relative paths of a local host are resolved against
the folder holding hosts.toml, so a checkout can point at its own engine environment.

A host of ``kind = "slurm"`` is a Slurm cluster reached through its login node (``ssh``, or this
machine without it): its ``[hosts.NAME.slurm]`` table says where and how jobs are submitted
(:class:`SlurmSettings`), and its ``workdir`` is the shared filesystem path where run folders live,
seen at the same path by the login node and every compute node (``engines/slurm``).
"""

from __future__ import annotations

import os
from pathlib import Path
import re
from typing import Annotated, Literal

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

LOCAL = "local"
#: Slurm's time formats: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
SLURM_TIME_RE = re.compile(r"^(\d+-\d{1,2}(:\d{1,2}){0,2}|\d+(:\d{1,2}){0,2})$")
#: An extra ``#SBATCH`` line: one option, no newline (it becomes one line of the job script).
SBATCH_OPTION_RE = re.compile(r"^--?[A-Za-z][A-Za-z0-9-]*(=[^\n\r]*)?$")


def default_workdir() -> str:
    """Where a local host keeps its runs unless hosts.toml says otherwise."""
    return str(Path(platformdirs.user_data_dir("servelab")))


class SlurmSettings(BaseModel):
    """One ``[hosts.NAME.slurm]`` table: how jobs are submitted to a Slurm cluster."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

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


class HostConfig(BaseModel):
    """One ``[hosts.NAME]`` table."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: str = LOCAL
    ssh: Annotated[str, Field(min_length=1)] | None = None
    python: Annotated[str, Field(min_length=1)] = "python3"
    workdir: Annotated[str, Field(min_length=1)] = Field(default_factory=default_workdir)
    gpus: list[Annotated[int, Field(ge=0)]] | Annotated[int, Field(ge=0)] | None = None
    connect_timeout: Annotated[float, Field(gt=0, le=600)] = 10.0
    #: The address other nodes of a multi-node experiment reach this host at (default: the host
    #: part of ``ssh``, or 127.0.0.1 for this machine).
    address: Annotated[str, Field(min_length=1)] | None = None
    #: ``plain`` (a machine servelab starts engines on) or ``slurm`` (a cluster it submits jobs to).
    kind: Literal["plain", "slurm"] = "plain"
    slurm: SlurmSettings | None = None
    #: Loads a fleet campaign runs here at once (``hosts = [...]`` in a campaign; one queue per host).
    campaign_slots: Annotated[int, Field(ge=1, le=64)] = 1

    @model_validator(mode="after")
    def _kind(self) -> HostConfig:
        if self.kind == "slurm" and self.slurm is None:
            raise ValueError('kind = "slurm" needs a [hosts.NAME.slurm] table (at least partition = "...")')
        if self.kind != "slurm" and self.slurm is not None:
            raise ValueError('a [hosts.NAME.slurm] table needs kind = "slurm"')
        if self.slurm is not None and self.gpus is not None:
            raise ValueError("a Slurm host's GPUs are Slurm's to give: set slurm.gpus_per_node, not gpus")
        return self

    @property
    def is_local(self) -> bool:
        return self.ssh is None

    @property
    def node_address(self) -> str:
        if self.address:
            return self.address
        if self.ssh is None:
            return "127.0.0.1"
        target = self.ssh.rpartition("@")[2]
        if target.startswith("["):
            return target[1:].partition("]")[0]
        return target.partition(":")[0] if target.count(":") == 1 else target

    @property
    def gpu_ids(self) -> list[int] | None:
        """GPU indices servelab may use on this host (None: whatever the host has)."""
        if self.gpus is None:
            return None
        return list(range(self.gpus)) if isinstance(self.gpus, int) else list(self.gpus)

    def resolved(self, base: Path) -> HostConfig:
        """Resolve relative local paths against ``base`` (the folder holding hosts.toml)."""
        if not self.is_local:
            return self
        updates: dict[str, object] = {}
        if self.slurm is not None and self.slurm.conf is not None and not self.slurm.conf.startswith("/"):
            conf = os.path.normpath(os.path.abspath(base / Path(self.slurm.conf).expanduser()))
            updates["slurm"] = self.slurm.model_copy(update={"conf": conf})
        for key in ("python", "workdir"):
            value: str = getattr(self, key)
            p = Path(value).expanduser()
            if "/" in value and not p.is_absolute():
                # Absolute but not symlink-resolved: a venv's bin/python is a symlink to the base
                # interpreter, and resolving it would lose the venv (and the engine with it).
                updates[key] = os.path.normpath(os.path.abspath(base / p))
            elif value.startswith("~"):
                updates[key] = str(p)
        return self.model_copy(update=updates) if updates else self


class HostsFile(BaseModel):
    """The whole hosts.toml."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    hosts: dict[str, HostConfig] = Field(default_factory=dict)

    def get(self, name: str) -> HostConfig | None:
        if name in self.hosts:
            return self.hosts[name]
        if name == LOCAL:
            return HostConfig(name=LOCAL)
        return None

    def names(self) -> list[str]:
        return sorted(set(self.hosts) | {LOCAL})
