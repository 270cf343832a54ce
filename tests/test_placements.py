"""Host kinds as placements: every kind hosts.toml accepts has one, each implements the protocol,
and the answers the core asks of a kind come from its placement (no kind test in the core)."""

from __future__ import annotations

import subprocess
import typing
from pathlib import Path

import pytest

from servelab.engines.errors import ServelabError
from servelab.engines.hosts.hostsfile import HostConfig
from servelab.engines.hosts.kinds import KindTable, kind_tables
from servelab.engines.placements.base import PLACEMENT_MODULES, Placement, placement_for
from servelab.engines.runs.placed import Placed, placed_of
from servelab.engines.runs.records import RunRecord

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
        ["grep", "-rlE", "--include=*.py", r"\.slurm\b|slurm_job|slurm_jobs|(cfg|host|config)\.kind ==", "engines/runs/manager.py", "engines/runs/records.py", "engines/runs/state.py", "engines/campaign", "engines/preflight", "tui"],
        cwd=REPO, capture_output=True, text=True,
    )
    assert done.returncode == 1 and done.stdout == "", done.stdout


_RUN = {"id": "x-20261207-050000-abcd", "experiment": "x", "engine": "vllm", "host": "h", "argv": ["vllm"], "env": {},
        "port": 8000, "model": "m", "run_dir": "/w/runs/x", "log_path": "/w/runs/x/engine.log", "status": "queued"}


@pytest.mark.parametrize(
    ("on_disk", "placed"),
    [
        ({}, Placed()),  # a run started as a process
        ({"placement": {"job": "41", "nodes": "n[1-2]", "state": "RUNNING", "reason": "None", "node_count": 2}},
         Placed("41", "n[1-2]", "RUNNING", "None", 2)),
        # a record an older servelab wrote: the placement's facts as flat <kind>_ keys
        ({"slurm_job": "7", "slurm_nodes": "n1", "slurm_state": "COMPLETED", "slurm_reason": "", "slurm_node_count": 1},
         Placed("7", "n1", "COMPLETED", "", 1)),
        ({"slurm_job": "8"}, Placed("8")),
        ({"slurm_job": None, "slurm_nodes": ""}, Placed()),  # submitted by nothing yet
    ],
)
def test_a_run_record_keeps_its_placements_facts_in_one_field_and_reads_older_records(on_disk: dict[str, object], placed: Placed) -> None:
    rec = RunRecord.from_json({**_RUN, **on_disk})
    assert rec.placement == placed == placed_of({**_RUN, **on_disk})
    written = rec.to_json()
    assert written["placement"] == placed.to_json() and not [k for k in written if k.endswith(("_job", "_node_count"))]
    assert RunRecord.from_json(written).placement == placed  # and it reads back the same


def test_only_the_slurm_package_its_placement_and_the_kinds_registry_name_slurm() -> None:
    """A host kind is a plug-in: the catalog, preflight, campaigns, runs and the CLI ask the kind's
    placement or its table (``engines/hosts/kinds.py``), so none of them names the scheduler."""
    done = subprocess.run(["grep", "-rli", "--include=*.py", "slurm", "engines", "tui"], cwd=REPO, capture_output=True, text=True)
    named = set(done.stdout.split())
    allowed = {"engines/hosts/kinds.py", "engines/placements/slurm.py"}
    assert named and not {p for p in named if p not in allowed and not p.startswith("engines/slurm/")}, sorted(named)


def test_a_kind_table_answers_what_the_catalog_asks_of_its_kind() -> None:
    """Each kind's table implements the protocol the catalog reads (one job over the nodes its
    scheduler picks: a rank's address; the backends it refuses), and a host's table is its kind's."""
    for kind, model in kind_tables().items():
        table = _host(kind).table
        assert isinstance(table, model) and isinstance(table, KindTable)
        assert table.rank_address(0, False) == table.rank_address(1, True) != table.rank_address(1, False)
        assert table.backend_problem("native") is None and table.backend_problem("ray")
    assert _host("plain").table is None
