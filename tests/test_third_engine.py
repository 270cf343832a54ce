"""A third engine from inside the test suite: ToyLLM, a TEST DOUBLE (tests/third_engine/).

It lives in its own files only and is registered with one line (:data:`REGISTRY_LINE`, the
``SERVELAB_ENGINES`` plug-in entry point the CLI reads). The real CLI then checks, launches, reads
the live log and status of, probes and stops it on the local host: real processes, real HTTP.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from servelab.engines.adapters import base as registry
from servelab.engines.adapters.base import PLUGIN_ENV, EngineAdapter, get_adapter
from servelab.engines.logs.files import analyze_bytes
from servelab.engines.errors import ServelabError
from tests.conftest import REPO
from tests.fixtures.ports import free_port
from tests.fixtures.runlab import Lab, group_members, is_running, toml_value, wait_for
from tests.third_engine import adapter as toy

#: The one registry line: engine name = the module that defines its ADAPTER.
REGISTRY_LINE = f"{toy.NAME}={toy.MODULE}"


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """ToyLLM registered here (and, through the environment, in every CLI this test starts)."""
    monkeypatch.setenv(PLUGIN_ENV, REGISTRY_LINE)
    monkeypatch.setitem(registry.ENGINE_MODULES, toy.NAME, toy.MODULE)  # this process (what the env var does at import)
    return {PLUGIN_ENV: REGISTRY_LINE}


def servelab(lab: Lab, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "servelab.tui.cli", "--dir", str(lab.folder), *args],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "COLUMNS": "200"}, stdin=subprocess.DEVNULL, timeout=timeout,
    )


def write_toy(lab: Lab, name: str, port: int, extra: str = "") -> None:
    (lab.folder / f"{name}.toml").write_text(
        f'engine = "{toy.NAME}"\nhost = "local"\nmodel = {toml_value(str(lab.folder / "toy-weights"))}\nport = {port}\n'
        f'served_model_name = "toy-tiny"\n{extra}'
        '[speculative]\nmethod = "ngram"\nnum_tokens = 2\n'
        '[probe]\nprompts = "builtin:translation"\nmax_tokens = 16\nrepeats = 1\nwarmup = 0\n'
    )


def status_of(lab: Lab, run_id: str) -> dict[str, Any]:
    out = servelab(lab, "status", run_id, "--json")
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


def test_the_test_double_is_an_adapter_and_its_log_is_its_own(registered: dict[str, str]) -> None:
    adapter = get_adapter(toy.NAME)
    assert isinstance(adapter, EngineAdapter) and adapter is toy.ADAPTER
    log = (
        b"[toyllm 12:00:00] starting toyllm 0.3.1 (model tiny, port 8000)\n"
        b"[toyllm 12:00:00] config: {'max_len': 2048, 'spec_tokens': 2}\n"
        + b"".join(b"[toyllm 12:00:01] loading weights %d/3\n" % i for i in (1, 2, 3))
        + b"[toyllm 12:00:02] weights loaded in 0.06 s\n[toyllm 12:00:02] warming up\n[toyllm] ready on port 8000\n"
    )
    a = analyze_bytes(log)  # the engine guessed from its signature
    assert a.engine == toy.NAME and a.state == "ready"
    # its header is an engine line (its grammar's line_starts), not a capture tool's prefix to strip
    assert a.prefix is None
    stages = {s.name: s for s in a.stages}
    assert stages["weights"].started_at == "12:00:01" and stages["weights"].detail == "loaded in 0.06 s"
    assert stages["process"].detail == "toyllm 0.3.1"
    # the same log behind a capture tool's prefix: the tool's prefix goes, the engine's header stays
    shown = analyze_bytes(b"".join(b"toy-1  | " + line + b"\n" for line in log.splitlines()))
    assert shown.prefix is not None and shown.prefix.examples == ("toy-1  | ",) and shown.state == "ready"


def test_a_plug_in_entry_that_cannot_load_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "ENGINE_MODULES", dict(registry.ENGINE_MODULES))
    registry.register_engine("nosuch", "tests.third_engine.nosuch")
    with pytest.raises(ServelabError, match=r"^engine 'nosuch': tests\.third_engine\.nosuch\.ADAPTER cannot be loaded"):
        get_adapter("nosuch")
    with pytest.raises(ValueError):
        registry.register_engine("Bad Name", "x")
    out = subprocess.run(
        [sys.executable, "-c", "from servelab.engines.adapters.base import get_adapter; get_adapter('toyllm')"],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, PLUGIN_ENV: "toyllm:tests.third_engine.adapter"},
    )
    assert "SERVELAB_ENGINES entries not NAME=MODULE: 'toyllm:tests.third_engine.adapter'" in out.stderr


def test_check_launch_live_log_status_probe_and_stop(registered: dict[str, str], lab: Lab) -> None:
    port = free_port()
    write_toy(lab, "toy", port)
    write_toy(lab, "toy-wide", free_port(), "[parallel]\ntensor = 2\n")

    # check: the definitions, judged by the plug-in's own problems()
    checked = servelab(lab, "check")
    assert checked.returncode == 1 and "toy-wide.toml" in checked.stdout + checked.stderr
    assert "ToyLLM runs one process" in checked.stdout + checked.stderr and "toy.toml" not in checked.stdout + checked.stderr
    (lab.folder / "toy-wide.toml").unlink()
    assert servelab(lab, "check").returncode == 0

    # launch: the adapter's argv, started detached by the host-side supervisor
    out = servelab(lab, "launch", "toy", "--json", "--skip-preflight")
    assert out.returncode == 0, out.stderr
    launched = json.loads(out.stdout)
    run_id, pid = launched["run"], launched["pid"]

    # the live log, through status: its stages and its ready line, by its own grammar
    seen: dict[str, Any] = {}

    def ready() -> bool:
        seen.update(status_of(lab, run_id))
        return seen.get("state") == "ready"

    wait_for(ready, timeout=90, step=0.2, why=lambda: json.dumps(seen)[:600])
    stages = {s["name"]: s for s in seen["stages"]}
    assert stages["process"]["detail"] == "toyllm 0.3.1" and stages["process"]["status"] == "done"
    assert stages["weights"]["status"] == "done" and stages["weights"]["detail"].startswith("loaded in ")
    assert stages["ready"]["status"] == "done" and seen["alive"] is True
    logs = servelab(lab, "logs", run_id)
    assert logs.returncode == 0 and f"[toyllm] ready on port {port}" in logs.stdout

    # probe: real streamed requests, its version, its /metrics histograms and acceptance counters
    probed = servelab(lab, "probe", run_id, "--json", timeout=300)
    assert probed.returncode == 0, probed.stderr
    summary = json.loads(probed.stdout)
    assert summary["backend"] == toy.NAME and summary["model_id"] == "toy-tiny" and summary["num_prompts"] == 2
    assert summary["identity"]["engine_version"] == "0.3.1"
    assert summary["output_throughput"] > 0 and summary["completed"] == 2
    # 2 drafts a step, 1 accepted: acceptance rate 0.5, length 2 (its read_acceptance, from /metrics)
    assert summary["acceptance_source"] == "toyllm /metrics"
    assert summary["spec_decode_acceptance_rate"] == pytest.approx(50.0) and summary["spec_decode_acceptance_length"] == pytest.approx(2.0)
    assert summary["server_requests"] == 2 and summary["server_mean_ttft_ms"] > 0

    # stop: the whole process group (the server and its worker), and status says so; the file it
    # holds in /dev/shm goes with it (its shm_prefixes, carried by the run record to the host)
    members = group_members(pid)
    assert len(members) == 2, members
    shm = Path(f"/dev/shm/{toy.ADAPTER.shm_prefixes[0]}{pid}")
    assert shm.exists()
    assert json.loads((Path(launched["run_dir"]) / "run.json").read_text())["shm_prefixes"] == list(toy.ADAPTER.shm_prefixes)
    stopped = servelab(lab, "stop", run_id, "--grace", "5")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stderr
    assert not any(is_running(p) for p in members)
    after = status_of(lab, run_id)
    assert (after["alive"], after["status"]) == (False, "stopped")
    assert not shm.exists()
    assert servelab(lab, "cleanup").stdout.strip() == "nothing to clean up"
