"""The experiment definition: one TOML file per experiment, validated strictly.

Unknown keys are rejected so that a typo (``tensr = 8``) is an error at check time and never a
silently ignored setting on a 25-minute load.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from servelab.engines.drafter.findings import CODES
from servelab.engines.hosts.kinds import node_picking_titles

SpecMethod = Literal["none", "eagle", "eagle3", "mtp", "ngram", "draft_model"]
ArgValue = str | int | float | bool | list[str | int | float]

#: Methods that need a separate drafter checkpoint.
NEEDS_DRAFTER: frozenset[str] = frozenset({"eagle", "eagle3", "draft_model"})


class Strict(BaseModel):
    """Base for every definition table: unknown keys are errors, values are not coerced."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Parallel(Strict):
    """Parallel sizes. Each engine adapter says which combinations it can express."""

    tensor: Annotated[int, Field(ge=1)] = 1
    data: Annotated[int, Field(ge=1)] = 1
    expert: Annotated[int, Field(ge=1)] = 1
    pipeline: Annotated[int, Field(ge=1)] = 1

    @property
    def gpus(self) -> int:
        """GPUs one replica set needs (tensor x pipeline x data)."""
        return self.tensor * self.pipeline * self.data


class Speculative(Strict):
    """Speculative decoding, in engine-neutral words; adapters translate it.

    ``num_tokens`` is the number of tokens drafted per verification step on a chain
    (vLLM's ``num_speculative_tokens``; SGLang's ``--speculative-num-steps`` with top-k 1).
    """

    method: SpecMethod = "none"
    draft_model: str | None = None
    num_tokens: Annotated[int, Field(ge=1)] | None = None
    num_steps: Annotated[int, Field(ge=1)] | None = None
    eagle_topk: Annotated[int, Field(ge=1)] | None = None
    num_draft_tokens: Annotated[int, Field(ge=1)] | None = None
    prompt_lookup_min: Annotated[int, Field(ge=1)] | None = None
    prompt_lookup_max: Annotated[int, Field(ge=1)] | None = None
    draft_tensor_parallel: Annotated[int, Field(ge=1)] | None = None
    extra: dict[str, Any] = Field(default_factory=dict)
    #: Drafter-check error codes that do not block a launch (``allow = ["aux-layers-convention"]``).
    allow: list[str] = Field(default_factory=list)
    #: The acceptance rate (accepted / drafted, 0..1) this drafter is expected to reach here, and
    #: where that figure comes from; the diagnosis holds the run against it when servelab has no
    #: earlier run of the same drafter (``expected_acceptance = 0.4``, ``expected_source = "..."``).
    expected_acceptance: Annotated[float, Field(gt=0, le=1)] | None = None
    expected_source: str | None = None

    @field_validator("allow")
    @classmethod
    def _known_codes(cls, v: list[str]) -> list[str]:
        unknown = [c for c in v if c not in CODES]
        if unknown:
            raise ValueError(f"unknown drafter check code(s) {', '.join(map(repr, unknown))} (known: {', '.join(CODES)})")
        return v

    @property
    def label(self) -> str:
        """The method and K in a narrow column ("eagle3 k=5", "draft k=2"): lists keep the run's state in view at 80 columns."""
        if self.method == "none":
            return "-"
        short = "draft" if self.method == "draft_model" else self.method
        return f"{short} k={self.num_tokens}" if self.num_tokens else short

    @model_validator(mode="after")
    def _method_needs(self) -> Speculative:
        m = self.method
        if m == "none":
            set_keys = [k for k in self.model_fields_set if k not in ("method", "extra")]
            if set_keys or self.extra:
                raise ValueError(f"method 'none' takes no other settings (got {', '.join(sorted(set_keys) or ['extra'])})")
            return self
        if m in NEEDS_DRAFTER and not self.draft_model:
            raise ValueError(f"method '{m}' needs draft_model (the drafter checkpoint path)")
        if (self.expected_acceptance is None) != (self.expected_source is None):
            raise ValueError("expected_acceptance and expected_source go together (a figure and where it comes from)")
        if m == "ngram" and self.draft_model:
            raise ValueError("method 'ngram' is model-free; remove draft_model")
        if self.num_tokens is None:
            raise ValueError(f"method '{m}' needs num_tokens (tokens drafted per step)")
        if m != "ngram" and (self.prompt_lookup_min or self.prompt_lookup_max):
            raise ValueError("prompt_lookup_min/max only apply to method 'ngram'")
        lo, hi = self.prompt_lookup_min, self.prompt_lookup_max
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"prompt_lookup_min ({lo}) is greater than prompt_lookup_max ({hi})")
        return self


class Patch(Strict):
    """A unified diff against the engine's installed package root."""

    file: str
    description: str = ""


class ProbeSettings(Strict):
    """How the acceptance probe runs right after the server is ready."""

    prompts: str = "builtin:mixed"
    max_tokens: Annotated[int, Field(ge=1, le=32768)] = 256
    concurrency: Annotated[int, Field(ge=1, le=256)] = 1
    repeats: Annotated[int, Field(ge=1, le=20)] = 3
    warmup: Annotated[int, Field(ge=0, le=20)] = 2
    auto: bool = True


class LaunchSettings(Strict):
    """``[launch]``: what a launch does before it starts the engine.

    ``rehearse``: ``"always"`` rehearses (``servelab rehearse``: the same start-up with dummy weights)
    before every launch; ``"when-changed"`` only when the inputs changed since the last good rehearsal;
    ``"never"`` (the default) only says whether the inputs were rehearsed.
    """

    rehearse: Literal["always", "when-changed", "never"] = "never"


class MultiNode(Strict):
    """``[multinode]``: which mechanism joins the hosts, and the head's rendezvous ports."""

    backend: Literal["ray", "native"]
    #: The head's rendezvous port: SGLang's ``--dist-init-addr HEAD:PORT``, vLLM's ``--master-port``.
    port: Annotated[int, Field(ge=1, le=65535)] = 29500
    #: The Ray head's GCS port (``ray start --head --port``), for ``backend = "ray"``.
    ray_port: Annotated[int, Field(ge=1, le=65535)] = 6379
    #: Seconds the nodes' join (rendezvous) may take before servelab calls it a hang (default: the engine's).
    rendezvous_s: Annotated[float, Field(gt=0, le=3600)] | None = None
    #: ``HOST`` or ``HOST:PORT`` (IPv6 in brackets): where the other nodes dial the head's rendezvous
    #: when that is not the head host's ``address`` in hosts.toml and ``port`` (a NAT or a container's
    #: mapped port, another interface of the head). The head itself binds ``port``. Native backend only.
    head_address: str | None = None
    #: How many nodes the scheduler allocates, for an experiment on one host whose scheduler picks
    #: nodes (``host = "cluster"``): one task each. Plain hosts are named instead (``hosts = [...]``).
    nodes: Annotated[int, Field(ge=2, le=1024)] | None = None

    @field_validator("head_address")
    @classmethod
    def _head_address(cls, v: str | None) -> str | None:
        if v is not None:
            split_host_port(v)
        return v


_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")


def split_host_port(text: str) -> tuple[str, int | None]:
    """``HOST``, ``HOST:PORT``, ``[V6]`` or ``[V6]:PORT`` as (host, port or None); ValueError says what is wrong."""
    host, port = text, None
    if "/" in text or any(c.isspace() for c in text):
        raise ValueError(f"{text!r}: HOST or HOST:PORT, no scheme, path or spaces (10.0.0.11:29500)")
    if text.startswith("["):
        inner, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"{text!r}: an IPv6 address goes in brackets, then :PORT if any ([fd00::5]:29500)")
        host, port_text = inner, rest[1:] if rest else None
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{text!r}: {host!r} is not an IPv6 address") from None
    else:
        if text.count(":") > 1:
            raise ValueError(f"{text!r}: put an IPv6 address in brackets ([{text}])")
        host, sep, port_text_ = text.partition(":")
        port_text = port_text_ if sep else None
        if not _HOSTNAME.match(host):
            raise ValueError(f"{text!r}: {host!r} is not a host name or IPv4 address")
    if port_text is not None:
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise ValueError(f"{text!r}: the port must be a number from 1 to 65535")
        port = int(port_text)
    return host, port


class Experiment(Strict):
    """One experiment definition, as written in ``experiments/NAME.toml``."""

    name: Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
    description: str = ""
    engine: str
    host: str = "local"
    model: Annotated[str, Field(min_length=1)]
    served_model_name: str | None = None
    port: Annotated[int, Field(ge=1, le=65535)] = 8000
    baseline: str | None = None
    tags: list[str] = Field(default_factory=list)
    parallel: Parallel = Field(default_factory=Parallel)
    speculative: Speculative = Field(default_factory=Speculative)
    engine_args: dict[str, ArgValue] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    patches: list[Patch] = Field(default_factory=list)
    probe: ProbeSettings = Field(default_factory=ProbeSettings)
    launch: LaunchSettings = Field(default_factory=LaunchSettings)
    #: Several hosts for one server, the head first (``host`` is then the head).
    hosts: list[str] = Field(default_factory=list)
    multinode: MultiNode | None = None

    @model_validator(mode="before")
    @classmethod
    def _head_is_host(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("hosts"), list) and data["hosts"] and "host" not in data:
            data = {**data, "host": data["hosts"][0]}
        return data

    @model_validator(mode="after")
    def _nodes(self) -> Experiment:
        if not self.hosts:
            if self.multinode is not None and self.multinode.nodes is None:
                raise ValueError(f"[multinode] needs hosts = [head, worker, ...] (two or more), or nodes = N on a {node_picking_titles()} host")
            return self
        if self.multinode is not None and self.multinode.nodes is not None:
            raise ValueError(f"[multinode] nodes is for one {node_picking_titles()} host (its scheduler picks the nodes): leave it out when hosts = [...] names them")
        if len(self.hosts) < 2:
            raise ValueError("hosts names one host: use host = \"...\" for a single node")
        if len(set(self.hosts)) != len(self.hosts):
            raise ValueError("hosts names a host twice")
        if self.host != self.hosts[0]:
            raise ValueError(f"host ({self.host}) must be the head, hosts[0] ({self.hosts[0]}), or be left out")
        if self.multinode is None:
            raise ValueError('several hosts need [multinode] backend = "ray" or "native"')
        return self

    @property
    def nodes(self) -> list[str]:
        """Every host the experiment runs on, the head first."""
        return list(self.hosts) or [self.host]

    @property
    def spans_hosts(self) -> bool:
        """A run per host (``hosts = [...]``), launched and stopped together by ``engines/nodes``.
        A multi-node experiment on one scheduler's host (``[multinode] nodes``) is one run: one job."""
        return bool(self.hosts)

    @property
    def node_count(self) -> int:
        """How many nodes the server spans."""
        return len(self.hosts) or (self.multinode.nodes or 1 if self.multinode is not None else 1)

    @field_validator("engine_args")
    @classmethod
    def _flag_names(cls, v: dict[str, ArgValue]) -> dict[str, ArgValue]:
        for key in v:
            if key.startswith("-") or not key or any(c.isspace() for c in key):
                raise ValueError(f"flag name {key!r}: write it without dashes and spaces, e.g. max-model-len")
        return v

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if not key.replace("_", "a").isalnum() or key[0].isdigit():
                raise ValueError(f"environment variable name {key!r} is not a valid name")
        return v


class SourcedExperiment(BaseModel):
    """An experiment plus where it came from, so every message can point at the file."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    experiment: Experiment
    path: Path
    text: str

    @property
    def name(self) -> str:
        return self.experiment.name

    @property
    def folder(self) -> Path:
        return self.path.parent

    def patch_path(self, patch: Patch) -> Path:
        """Patch files are relative to the experiments folder."""
        p = Path(patch.file).expanduser()
        return p if p.is_absolute() else self.folder / p

    def patch_hashes(self) -> list[tuple[Patch, str | None]]:
        """sha256 of every patch file (None when missing)."""
        out: list[tuple[Patch, str | None]] = []
        for patch in self.experiment.patches:
            try:
                out.append((patch, hashlib.sha256(self.patch_path(patch).read_bytes()).hexdigest()))
            except OSError:
                out.append((patch, None))
        return out

    def identity_hash(self) -> str:
        """A short hash of the definition's content, to tell two versions of a run apart."""
        data = self.experiment.model_dump(mode="json")
        for key in ("hosts", "multinode"):  # added later: absent when unused, so old hashes hold
            if not data.get(key):
                data.pop(key, None)
        if isinstance(data.get("multinode"), dict) and data["multinode"].get("head_address") is None:
            data["multinode"].pop("head_address", None)
        blob = json.dumps(data, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]
