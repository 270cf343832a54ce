"""`servelab list`, `show` and `check` as a user runs them (a real subprocess)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import EXPERIMENTS, REPO


def servelab(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "servelab", *args], capture_output=True, text=True, cwd=cwd, timeout=60)


def test_list_json_shows_every_bundled_experiment() -> None:
    out = servelab("list", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert sorted(r["name"] for r in rows) == sorted(p.stem for p in EXPERIMENTS.glob("*.toml") if p.stem != "hosts")
    for row in rows:
        assert {"name", "engine", "host", "file", "speculative"} <= set(row)
        assert Path(REPO, row["file"]).exists()
    by_name = {r["name"]: r for r in rows}
    assert by_name["tiny-cpu-vllm-ngram"]["speculative"]["method"] == "ngram"
    assert by_name["kimi-k25-sglang-eagle3"]["engine"] == "sglang"
    assert (by_name["tiny-cpu-sglang-baseline"]["engine"], by_name["tiny-cpu-sglang-baseline"]["host"]) == ("sglang", "local-sglang")
    assert by_name["kimi-k25-vllm-baseline"]["speculative"]["method"] == "none"


def test_list_table_names_every_experiment() -> None:
    out = servelab("list")
    assert out.returncode == 0
    for name in ("tiny-cpu-vllm-ngram", "kimi-k25-vllm-eagle3"):
        assert name in out.stdout.replace("\n", "")


def test_check_passes_on_bundled() -> None:
    out = servelab("check")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout == ""


def test_check_reports_one_line_per_problem(tmp_path: Path) -> None:
    folder = tmp_path / "ex"
    shutil.copytree(EXPERIMENTS, folder)
    (folder / "bad.toml").write_text('engine = "vllm"\nmodel = "/m"\nport = "eighty"\n[speculative]\nmethod = "eagle3"\nnum_tokens = 2\n')
    out = servelab("--dir", str(folder), "check")
    assert out.returncode == 1
    lines = out.stdout.splitlines()
    assert not any("blackwell" in line for line in lines)  # a remote host's python is its own: never judged from here
    assert lines[0].endswith(":3: port: Input should be a valid integer")
    assert ":4: speculative:" in lines[1] and "draft_model" in lines[1]


def test_show_prints_the_command_and_patch_hashes() -> None:
    out = servelab("show", "kimi-k25-vllm-eagle3")
    assert out.returncode == 0, out.stderr
    assert "vllm.entrypoints.openai.api_server" in out.stdout
    assert "--speculative-config" in out.stdout
    assert out.stdout.count("sha256 ") == 3
    js = json.loads(servelab("show", "tiny-cpu-vllm-ngram", "--json").stdout)
    assert js["argv"][1:3] == ["-m", "vllm.entrypoints.openai.api_server"]


def test_unknown_experiment_and_wrong_flag_are_one_line() -> None:
    out = servelab("show", "nope")
    assert out.returncode == 1 and out.stderr.count("\n") == 1 and "no experiment named 'nope'" in out.stderr
    out = servelab("list", "--jsn")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "unrecognized arguments" in out.stderr
    assert "Traceback" not in out.stderr


def test_check_warns_of_paths_that_will_not_work_on_their_host(tmp_path: Path) -> None:
    folder = tmp_path / "copied"  # an experiments folder copied away from its checkout: ../.venv-engine is gone
    shutil.copytree(EXPERIMENTS, folder)
    hosts = folder / "hosts.toml"
    hosts.write_text(hosts.read_text() + '\n[hosts.gpubox]\nssh = "gpubox"\npython = "/opt/venv/bin/python"\nworkdir = "/data/servelab"\n')
    (folder / "remote.toml").write_text('engine = "vllm"\nhost = "gpubox"\nmodel = "../.models/tiny-llama"\nport = 8000\n')
    out = servelab("--dir", str(folder), "check")
    assert out.returncode == 0, out.stdout + out.stderr  # warnings, not problems: the definitions are valid
    assert out.stdout == ""  # problems only on stdout
    lines = [line for line in out.stderr.splitlines() if ": warning: " in line]
    python = next(line for line in lines if "hosts.local.python" in line)
    assert python.endswith(
        f"hosts.toml:5: hosts.local.python: warning: {tmp_path / '.venv-engine' / 'bin' / 'python'} does not exist on this machine "
        f"('../.venv-engine/bin/python' is relative to {folder}): a launch on local would fail"
    ), python
    model = next(line for line in lines if "remote.toml" in line)
    assert ":3: model: warning: '../.models/tiny-llama' is relative, and host gpubox is reached over SSH (gpubox)" in model
    assert "from the SSH login directory (preflight's checks) and from the run's folder /data/servelab/runs/<run>" in model
    sglang = next(line for line in lines if "hosts.local-sglang.python" in line)  # the SGLang environment's host, also relative
    assert f"warning: {tmp_path / '.venv-sglang' / 'bin' / 'python'} does not exist on this machine" in sglang
    warned = sorted(line.split(": ")[1] for line in lines if "hosts.toml:" in line)
    assert warned == ["hosts.local-sglang-b.python", "hosts.local-sglang.python", "hosts.local.python"]  # every local host's, once
    assert len(lines) == len(warned) + 1
    assert not any("blackwell" in line for line in lines)  # a remote host's python is its own: never judged from here


def test_check_compares_baseline_models_as_their_host_sees_them(tmp_path: Path) -> None:
    folder = tmp_path / "ex"
    shutil.copytree(EXPERIMENTS, folder)
    models = (folder / ".." / ".models" / "tiny-llama").resolve()
    # the same folder written two ways on the same host: the same model
    (folder / "abs.toml").write_text(f'engine = "vllm"\nmodel = "{models}"\nport = 8001\nbaseline = "tiny-cpu-vllm-baseline"\n')
    assert servelab("--dir", str(folder), "check", "abs").returncode == 0
    (folder / "abs.toml").write_text(f'engine = "vllm"\nmodel = "{models.parent / "other"}"\nport = 8001\nbaseline = "tiny-cpu-vllm-baseline"\n')
    out = servelab("--dir", str(folder), "check", "abs")
    assert out.returncode == 1
    assert (
        f"baseline: baseline 'tiny-cpu-vllm-baseline' runs another model: {models} on local (from '../.models/tiny-llama'), "
        f"this one {models.parent / 'other'} on local"
    ) in out.stdout
