"""Multi-node definitions: checks that span hosts, and each node's exact argv and environment."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.engines.catalog.folder import check, load_catalog
from servelab.engines.hosts.hostsfile import HostConfig
from servelab.engines.nodes.plan import start_order
from tests.conftest import EXPERIMENTS, REPO

HOSTS = """
[hosts.gpu-a]
ssh = "root@10.0.0.11"
python = "/venv/bin/python3"
gpus = 8

[hosts.gpu-b]
ssh = "root@gpu-b.example"
address = "10.0.0.12"
python = "/opt/env/bin/python3"
gpus = 8
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    dest = tmp_path / "experiments"
    shutil.copytree(EXPERIMENTS, dest)
    with (dest / "hosts.toml").open("a") as f:
        f.write(HOSTS)
    return dest


def experiment(folder: Path, body: str, name: str = "two") -> str:
    (folder / f"{name}.toml").write_text('model = "/shared/m"\nport = 30000\n' + body)
    return name


def problems(folder: Path, name: str) -> list[str]:
    return [str(p) for p in check(folder, [name])[1]]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ('engine = "sglang"\nhosts = ["gpu-a"]\n[multinode]\nbackend = "native"\n', "names one host"),
        ('engine = "sglang"\nhosts = ["gpu-a", "gpu-b"]\n', "need [multinode]"),
        ('engine = "sglang"\nhost = "gpu-a"\n[multinode]\nbackend = "native"\n', "needs hosts"),
        ('engine = "sglang"\nhosts = ["gpu-a", "gpu-a"]\n[multinode]\nbackend = "native"\n', "twice"),
        ('engine = "sglang"\nhost = "gpu-b"\nhosts = ["gpu-a", "gpu-b"]\n[multinode]\nbackend = "native"\n', "must be the head"),
        ('engine = "sglang"\nhosts = ["gpu-a", "gpu-c"]\n[multinode]\nbackend = "native"\n', "unknown host 'gpu-c'"),
        ('engine = "sglang"\nhosts = ["gpu-a", "gpu-b"]\n[multinode]\nbackend = "ray"\n', "not a multi-node mechanism of this engine (it has: native)"),
        ('engine = "vllm"\nhosts = ["gpu-a", "gpu-b"]\n[multinode]\nbackend = "mpi"\n', "multinode.backend"),
        ('engine = "vllm"\nhosts = ["gpu-a", "gpu-b"]\n[multinode]\nbackend = "native"\n[parallel]\ntensor = 3\n', "does not split evenly over 2 nodes"),
        ('engine = "vllm"\nhosts = ["gpu-a", "gpu-b"]\n[multinode]\nbackend = "native"\n[parallel]\ntensor = 8\npipeline = 3\n', "needs 12 per node (gpu-a has 8; gpu-b has 8"),
        ('engine = "vllm"\nhosts = ["gpu-a", "gpu-b"]\n[multinode]\nbackend = "native"\n[engine_args]\nnode-rank = 1\n', "sets this flag on each node"),
        ('engine = "sglang"\nhosts = ["gpu-a", "gpu-b"]\n[multinode]\nbackend = "native"\nhead_address = "tcp://10.0.0.11"\n', "HOST or HOST:PORT, no scheme, path or spaces"),
        ('engine = "sglang"\nhosts = ["gpu-a", "gpu-b"]\n[multinode]\nbackend = "native"\nhead_address = "-bad-:29500"\n', "'-bad-' is not a host name or IPv4 address"),
        ('engine = "sglang"\nhosts = ["gpu-a", "gpu-b"]\n[multinode]\nbackend = "native"\nhead_address = "fd00::5"\n', "put an IPv6 address in brackets ([fd00::5])"),
        ('engine = "sglang"\nhosts = ["gpu-a", "gpu-b"]\n[multinode]\nbackend = "native"\nhead_address = "[fd00::5"\n', "an IPv6 address goes in brackets"),
        ('engine = "sglang"\nhosts = ["gpu-a", "gpu-b"]\n[multinode]\nbackend = "native"\nhead_address = "10.0.0.11:0"\n', "the port must be a number from 1 to 65535"),
        ('engine = "sglang"\nhosts = ["gpu-a", "gpu-b"]\n[multinode]\nbackend = "native"\nhead_address = "head node"\n', "no scheme, path or spaces"),
        ('engine = "vllm"\nhosts = ["gpu-a", "gpu-b"]\n[multinode]\nbackend = "ray"\nhead_address = "10.1.0.11"\n', "head_address: vllm: is for the native backend"),
        # servelab's own machine as the head, with no address: the worker would dial itself
        ('engine = "sglang"\nhosts = ["local", "gpu-b"]\n[multinode]\nbackend = "native"\n', "gpu-b would dial the head at 127.0.0.1, i.e. itself (the head, local, has no address in hosts.toml): set address = \"<its address on the nodes' network>\" under [hosts.local]"),
        ('engine = "sglang"\nhosts = ["gpu-a", "gpu-b"]\n[multinode]\nbackend = "native"\nhead_address = "localhost:5000"\n', "gpu-b would dial the head at localhost, i.e. itself ([multinode] head_address)"),
    ],
)
def test_check_rejects_bad_combinations(folder: Path, body: str, words: str) -> None:
    found = problems(folder, experiment(folder, body))
    assert any(words in p for p in found), found
    assert all(p.startswith("two.toml:") or "/two.toml:" in p for p in found)


def test_good_two_node_experiments_pass(folder: Path) -> None:
    for engine, backend in (("sglang", "native"), ("vllm", "ray"), ("vllm", "native")):
        name = experiment(folder, f'engine = "{engine}"\nhosts = ["gpu-a", "gpu-b"]\n[multinode]\nbackend = "{backend}"\n[parallel]\ntensor = 16\n')
        assert problems(folder, name) == []


def plans(folder: Path, body: str):  # type: ignore[no-untyped-def]
    name = experiment(folder, body)
    cat = load_catalog(folder)
    return cat.node_plans(cat.get(name))


def test_sglang_runs_the_same_command_on_every_node_but_the_rank(folder: Path) -> None:
    p = plans(folder, 'engine = "sglang"\nhosts = ["gpu-a", "gpu-b"]\n[multinode]\nbackend = "native"\nport = 5000\n[parallel]\ntensor = 16\n')
    assert [n.node.address for n in p] == ["10.0.0.11", "10.0.0.12"]
    head, worker = (n.processes[0].spec.argv for n in p)
    assert head[0] == "/venv/bin/python3" and worker[0] == "/opt/env/bin/python3"  # each host's own interpreter
    for argv, rank in ((head, "0"), (worker, "1")):
        assert argv[argv.index("--nnodes") + 1] == "2"
        assert argv[argv.index("--node-rank") + 1] == rank
        assert argv[argv.index("--dist-init-addr") + 1] == "10.0.0.11:5000"
        assert argv[argv.index("--tp-size") + 1] == "16"
    strip = lambda argv: [a for i, a in enumerate(argv[1:]) if argv[i] != "--node-rank"]  # noqa: E731
    assert strip(head) == strip(worker)
    assert [proc.serves for n in p for proc in n.processes] == [True, False]


def test_vllm_ray_starts_the_cluster_then_one_server_on_the_head(folder: Path) -> None:
    p = plans(folder, 'engine = "vllm"\nhosts = ["gpu-a", "gpu-b"]\n[multinode]\nbackend = "ray"\n[parallel]\ntensor = 8\npipeline = 2\n')
    roles = [[proc.role for proc in n.processes] for n in p]
    assert roles == [["ray-head", "server"], ["ray-worker"]]
    ray_head, server = p[0].processes
    ray_worker = p[1].processes[0]
    assert ray_head.spec.argv[:3] == ["/venv/bin/ray", "start", "--block"]
    assert "--head" in ray_head.spec.argv and ray_head.spec.argv[ray_head.spec.argv.index("--port") + 1] == "6379"
    assert ray_worker.spec.argv[0] == "/opt/env/bin/ray"
    assert ray_worker.spec.argv[ray_worker.spec.argv.index("--address") + 1] == "10.0.0.11:6379"
    assert ray_head.spec.env["VLLM_HOST_IP"] == "10.0.0.11" and ray_worker.spec.env["VLLM_HOST_IP"] == "10.0.0.12"
    argv = server.spec.argv
    assert argv[argv.index("--distributed-executor-backend") + 1] == "ray"
    assert argv[argv.index("--pipeline-parallel-size") + 1] == "2"
    assert server.serves and server.spec.env["RAY_ADDRESS"] == "10.0.0.11:6379"
    order = [p[rank].processes[i].role for rank, i in start_order(p)]
    assert order == ["ray-head", "ray-worker", "server"]


def test_head_address_is_where_the_workers_dial_the_head_binds_its_own(folder: Path) -> None:
    """A head behind a port mapping or on another interface: the workers dial ``head_address``
    (its port, else ``port``), the head keeps its hosts.toml address and ``port``."""
    body = '[multinode]\nbackend = "native"\nport = 5000\nhead_address = "{}"\n[parallel]\ntensor = 16\n'
    sgl = plans(folder, 'engine = "sglang"\nhosts = ["gpu-a", "gpu-b"]\n' + body.format("10.1.0.11:6000"))
    dial = [n.processes[0].spec.argv for n in sgl]
    assert [argv[argv.index("--dist-init-addr") + 1] for argv in dial] == ["10.0.0.11:5000", "10.1.0.11:6000"]
    v6 = plans(folder, 'engine = "sglang"\nhosts = ["gpu-a", "gpu-b"]\n' + body.format("[fd00::11]"))
    assert [n.processes[0].spec.argv[n.processes[0].spec.argv.index("--dist-init-addr") + 1] for n in v6] == ["10.0.0.11:5000", "[fd00::11]:5000"]
    vl = plans(folder, 'engine = "vllm"\nhosts = ["gpu-a", "gpu-b"]\n' + body.format("head-ib.example:6000"))
    got = [(a[a.index("--master-addr") + 1], a[a.index("--master-port") + 1]) for a in (n.processes[0].spec.argv for n in vl)]
    assert got == [("10.0.0.11", "5000"), ("head-ib.example", "6000")]
    assert problems(folder, "two") == []


def test_vllm_native_makes_every_node_but_the_head_headless(folder: Path) -> None:
    p = plans(folder, 'engine = "vllm"\nhosts = ["gpu-a", "gpu-b"]\n[multinode]\nbackend = "native"\nport = 29501\n[parallel]\ntensor = 16\n')
    head, worker = (n.processes[0] for n in p)
    assert "--headless" not in head.spec.argv and head.serves
    assert "--headless" in worker.spec.argv and not worker.serves
    for proc, rank in ((head, "0"), (worker, "1")):
        argv = proc.spec.argv
        assert argv[argv.index("--node-rank") + 1] == rank
        assert argv[argv.index("--master-addr") + 1] == "10.0.0.11"
        assert argv[argv.index("--master-port") + 1] == "29501"
    assert [p[r].processes[i].role for r, i in start_order(p)] == ["headless", "server"]


@pytest.mark.parametrize(
    ("ssh", "address", "expected"),
    [(None, None, "127.0.0.1"), ("root@10.0.0.12", None, "10.0.0.12"), ("me@gpubox:2222", None, "gpubox"), ("gpubox", None, "gpubox"), ("me@[fd00::5]:22", None, "fd00::5"), ("gpubox", "192.0.2.7", "192.0.2.7")],
)
def test_node_address(ssh: str | None, address: str | None, expected: str) -> None:
    assert HostConfig(ssh=ssh, address=address).node_address == expected


def test_show_prints_each_node(folder: Path) -> None:
    experiment(folder, 'engine = "vllm"\nhosts = ["gpu-a", "gpu-b"]\n[multinode]\nbackend = "ray"\n[parallel]\ntensor = 16\n')
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    run = lambda *a: subprocess.run([sys.executable, "-m", "servelab", "--dir", str(folder), "show", "two", *a], capture_output=True, text=True, timeout=120, env=env)  # noqa: E731
    text = run().stdout
    assert "node 0 (head) gpu-a at 10.0.0.11" in text and "node 1 gpu-b at 10.0.0.12" in text
    assert "VLLM_HOST_IP=10.0.0.12 /opt/env/bin/ray start --block --node-ip-address 10.0.0.12 --address 10.0.0.11:6379" in text
    doc = json.loads(run("--json").stdout)
    assert [n["host"] for n in doc["nodes"]] == ["gpu-a", "gpu-b"]
    assert [p["role"] for p in doc["nodes"][0]["processes"]] == ["ray-head", "server"]


def test_an_ssh_alias_is_reached_at_its_ssh_config_hostname(folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engines cannot resolve an alias only ssh knows: the nodes are given its HostName; an alias of
    this machine (127.0.0.1) beside a ``local`` head is no remote worker, one of another machine is."""
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host gpu-c\n    HostName 10.0.0.13\n    Port 2222\n\nHost here\n    HostName 127.0.0.1\n")
    monkeypatch.setenv("SERVELAB_SSH_CONFIG", str(cfg))
    with (folder / "hosts.toml").open("a") as f:
        f.write('\n[hosts.gpu-c]\nssh = "gpu-c"\n\n[hosts.here]\nssh = "here"\n')
    p = plans(folder, 'engine = "sglang"\nhosts = ["gpu-a", "gpu-c"]\n[multinode]\nbackend = "native"\nport = 5000\n')
    assert [n.node.address for n in p] == ["10.0.0.11", "10.0.0.13"]
    experiment(folder, 'engine = "sglang"\nhosts = ["local", "here"]\n[multinode]\nbackend = "native"\n', "loop")
    assert not any("would dial the head" in x for x in problems(folder, "loop"))
    experiment(folder, 'engine = "sglang"\nhosts = ["local", "gpu-c"]\n[multinode]\nbackend = "native"\n', "away")
    assert any("gpu-c would dial the head at 127.0.0.1, i.e. itself" in x for x in problems(folder, "away"))


def test_show_prints_each_native_node_with_its_own_argv_and_environment(folder: Path) -> None:
    """SGLang and vLLM native: every node's exact command (its interpreter, rank and where it dials
    the head) and the environment that differs per node; ``--json`` has each node's whole environment."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    run = lambda name, *a: subprocess.run([sys.executable, "-m", "servelab", "--dir", str(folder), "show", name, *a], capture_output=True, text=True, timeout=120, env=env)  # noqa: E731
    body = '[multinode]\nbackend = "native"\nport = 5000\nhead_address = "10.1.0.11:6000"\n[parallel]\ntensor = 16\n[env]\nNCCL_SOCKET_IFNAME = "ib0"\n'
    experiment(folder, 'engine = "sglang"\nhosts = ["gpu-a", "gpu-b"]\n' + body, "sgl")
    text = run("sgl").stdout
    assert "node 0 (head) gpu-a at 10.0.0.11" in text and "node 1 gpu-b at 10.0.0.12" in text, text
    assert "/venv/bin/python3 -m sglang.launch_server --model-path /shared/m" in text
    assert "--nnodes 2 --node-rank 0 --dist-init-addr 10.0.0.11:5000" in text and "--nnodes 2 --node-rank 1 --dist-init-addr 10.1.0.11:6000" in text
    doc = json.loads(run("sgl", "--json").stdout)
    for node in doc["nodes"]:
        (proc,) = node["processes"]
        assert proc["env"]["NCCL_SOCKET_IFNAME"] == "ib0" and proc["argv"][proc["argv"].index("--node-rank") + 1] == str(node["rank"])
    experiment(folder, 'engine = "vllm"\nhosts = ["gpu-a", "gpu-b"]\n' + body, "vl")
    text = run("vl").stdout
    assert "VLLM_HOST_IP=10.0.0.11 /venv/bin/python3 -m vllm.entrypoints.openai.api_server" in text, text
    assert "VLLM_HOST_IP=10.0.0.12 /opt/env/bin/python3 -m vllm.entrypoints.cli.main serve" in text
    assert "--master-addr 10.1.0.11 --master-port 6000 --headless" in text
    doc = json.loads(run("vl", "--json").stdout)
    assert [n["processes"][0]["env"]["VLLM_HOST_IP"] for n in doc["nodes"]] == ["10.0.0.11", "10.0.0.12"]


def test_the_bundled_two_node_pair_runs_on_this_machine_in_two_work_folders() -> None:
    """tiny-cpu-sglang-2node: both nodes are this machine (no ssh), each in its own workdir (so each
    node's run is found once), one core per rank, and the worker dials the head on loopback."""
    cat = load_catalog(EXPERIMENTS)
    exp = cat.get("tiny-cpu-sglang-2node")
    hosts = [cat.host(h) for h in exp.experiment.hosts]
    assert [h.ssh for h in hosts] == [None, None]
    assert len({h.workdir for h in hosts}) == 2
    head, worker = cat.node_plans(exp)
    for plan, rank in ((head, "0"), (worker, "1")):
        spec = plan.processes[0].spec
        assert spec.argv[spec.argv.index("--node-rank") + 1] == rank
        assert spec.argv[spec.argv.index("--dist-init-addr") + 1].startswith("127.0.0.1:")
        assert spec.env["SGLANG_CPU_OMP_THREADS_BIND"] == "0|1"
    assert check(EXPERIMENTS, ["tiny-cpu-sglang-2node"])[1] == []
