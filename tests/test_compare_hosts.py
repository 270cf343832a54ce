"""Speedups compare runs on the same host: when the baseline's probed run is on another host, compare
says where it looked and what it found; ``--baseline-run`` chooses one anyway, and the verdict marks
the cross-host pair (runs on this machine and over a real SSH server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from servelab.engines.verdict.compare import compare_runs
from tests.conftest import REPO
from tests.fixtures.runlab import STUB_PATH, Lab
from tests.fixtures.ports import free_port
from tests.fixtures.sshd import SshServer

pytestmark = pytest.mark.ssh


def summary(host: str, tput: float, baseline: str | None) -> dict[str, Any]:
    s: dict[str, Any] = {
        "output_throughput": tput, "max_tokens": 64, "max_concurrency": 1, "prompt_set_hash": "h1", "model_id": "tiny", "repeats": 3,
        "stats": {"output_throughput": {"median": tput, "mad": 0.5, "n": 3, "unstable": False}}, "unstable": [],
        "identity": {"engine": "vllm", "model": "/m/tiny", "spec_method": "ngram" if baseline else "none", "host": host, "prompt_set_hash": "h1"},
    }
    if baseline:
        s["baseline_experiment"] = baseline
        s["identity"]["baseline"] = baseline
    return s


def write_experiment(lab: Lab, name: str, host: str, baseline: str | None = None) -> None:
    lines = ['engine = "vllm"', f'host = "{host}"', f'model = "{lab.folder / "no-model"}"', f"port = {free_port()}"]
    if baseline:
        lines.append(f'baseline = "{baseline}"')
    lines += ["[env]", f'PYTHONPATH = "{STUB_PATH}"', 'STUB_LINES = "1"']
    (lab.folder / f"{name}.toml").write_text("\n".join(lines) + "\n")


async def test_a_baseline_probed_only_on_another_host(ssh_config: SshServer, lab: Lab) -> None:
    write_experiment(lab, "base", "local")
    write_experiment(lab, "cand", "box", baseline="base")
    runs = lab.runs()
    base = await runs.launch("base", skip_preflight=True)
    cand = await runs.launch("cand", skip_preflight=True)
    await runs.write_artifact(base.id, "probe.json", json.dumps(summary("local", 100.0, None)).encode())
    await runs.write_artifact(cand.id, "probe.json", json.dumps(summary("box", 150.0, "base")).encode())

    comp = await compare_runs(runs, [cand.id])
    line = next(v for v in comp.verdict if v.startswith(cand.id))
    assert line == (
        f"{cand.id}: no verdict on speculation: baseline base has a probed run on local ({base.id}), not on box; "
        f"speedups compare runs on the same host (choose one anyway with --baseline-run {base.id})"
    )

    out = subprocess.run(
        [sys.executable, "-m", "servelab.tui.cli", "--dir", str(lab.folder), "compare", cand.id, "--baseline-run", base.id, "--format", "json"],
        capture_output=True, text=True, cwd=REPO, env=dict(os.environ), timeout=60,
    )
    assert out.returncode == 0, out.stderr
    verdict = [v for v in json.loads(out.stdout)["verdict"] if v.startswith(cand.id)]
    assert verdict and verdict[0].startswith(f"{cand.id}: speculation HELPS vs {base.id}: speedup 1.50x")
    assert f"; CAVEAT: baseline {base.id} ran on local, this run on box, so hardware and load may differ; unpaired probes" in verdict[0]
