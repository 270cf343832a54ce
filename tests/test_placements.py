"""Host kinds as placements: every kind hosts.toml accepts has one, each implements the protocol,
and the answers the core asks of a kind come from its placement (no kind test in the core)."""

from __future__ import annotations

import subprocess
import typing
from pathlib import Path

import pytest

from servelab.engines.errors import ServelabError
from servelab.engines.hosts.hostsfile import HostConfig
from servelab.engines.placements.base import PLACEMENT_MODULES, Placement, placement_for

REPO = Path(__file__).resolve().parent.parent


def _kinds() -> tuple[str, ...]:
    return typing.get_args(HostConfig.model_fields["kind"].annotation)


def _host(kind: str) -> HostConfig:
    extra = {"slurm": {"partition": "debug", "gpus_per_node": 4}} if kind == "slurm" else {"gpus": [0, 1]}
    return HostConfig(name="h", kind=kind, python="python3", workdir="/tmp/w", **extra)


@pytest.mark.parametrize("kind", _kinds())
def test_every_host_kind_has_a_placement_that_implements_the_protocol(kind: str) -> None:
    placement = placement_for(_host(kind))
    assert isinstance(placement, Placement)
    assert placement.kind == kind
    assert placement.gpus(_host(kind)) in (2, 4)  # a plain host's listed GPUs, a batch host's per node


def test_the_registry_names_exactly_the_kinds_hosts_toml_accepts() -> None:
    assert set(PLACEMENT_MODULES) == set(_kinds())


def test_a_kind_without_a_placement_is_a_one_line_error() -> None:
    cfg = _host("plain").model_copy(update={"kind": "k8s"})
    with pytest.raises(ServelabError, match=r"^host h: no placement for kind 'k8s' \(known: plain, slurm\)$"):
        placement_for(cfg)


def test_the_run_lifecycle_and_the_cli_never_test_a_host_kind() -> None:
    """The run manager, campaigns, preflight and the CLI ask a placement; only the placements and
    the Slurm package name a scheduler's fields."""
    done = subprocess.run(
        ["grep", "-rlE", "--include=*.py", r"\.slurm\b|slurm_job|slurm_jobs|(cfg|host|config)\.kind ==", "engines/runs/manager.py", "engines/campaign", "engines/preflight", "tui"],
        cwd=REPO, capture_output=True, text=True,
    )
    assert done.returncode == 1 and done.stdout == "", done.stdout
