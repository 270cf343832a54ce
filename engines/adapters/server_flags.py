"""The part of an engine's server command line that every adapter writes the same way: the model,
the port, the served name, the parallel sizes (each engine's own flag names, in its own order)
and the ``[engine_args]`` servelab does not manage."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from servelab.engines.adapters.base import render_flags
from servelab.engines.catalog.experiment import Experiment

Axis = Literal["tensor", "pipeline", "data", "expert"]


@dataclass(frozen=True)
class ParallelFlag:
    """``flag`` is written when the experiment's ``axis`` size is above 1: ``flag N``, or ``flag`` alone
    where the engine takes a switch (``sized=False``)."""

    axis: Axis
    flag: str
    sized: bool = True


def server_flags(exp: Experiment, model_flag: str, model: str, parallel: Sequence[ParallelFlag], managed: Mapping[str, str]) -> list[str]:
    flags = [model_flag, model, "--port", str(exp.port)]
    if exp.served_model_name:
        flags += ["--served-model-name", exp.served_model_name]
    for p in parallel:
        size: int = getattr(exp.parallel, p.axis)
        if size > 1:
            flags += [p.flag, str(size)] if p.sized else [p.flag]
    rendered, _ = render_flags({k: v for k, v in exp.engine_args.items() if k not in managed})
    return flags + rendered


def with_flag(argv: Sequence[str], flag: str, value: str) -> list[str]:
    """``argv`` with ``flag value`` set: an existing ``flag X`` (or ``flag=X``) gets ``value``, else it is appended."""
    out = list(argv)
    for i, word in enumerate(out):
        if word == flag and i + 1 < len(out):
            out[i + 1] = value
            return out
        if word.startswith(flag + "="):
            out[i] = f"{flag}={value}"
            return out
    return out + [flag, value]


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value ``argv`` gives ``flag`` (``flag X`` or ``flag=X``), None when it has none."""
    for i, word in enumerate(argv):
        if word == flag and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return None
