"""What a target fingerprint costs on a checkpoint of the story's shape: Kimi-K2.5, 64 shards, ~547 GB.

    python bench/target_fingerprint.py [--dir DIR] [--keep]

Makes the checkpoint as sparse files (real-looking headers: 61 layers, 384 experts of INT4
``weight_packed``/``weight_scale``/``weight_shape`` tensors, MLA attention, ~3,300 tensors a shard;
data left as holes, so it takes a few MB of disk), then fingerprints it with the helper the hosts
run (``engines/helpers/weightprint.py``), in process and as the host runs it (``python weightprint.py``,
the interpreter's start included): cold (no cache) and warm (the cache by size, mtime and inode).
Prints MB read and seconds for each.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HELPER = ROOT / "engines" / "helpers" / "weightprint.py"
sys.path.insert(0, str(HELPER.parent))

import weightprint  # type: ignore[import-not-found]  # noqa: E402

SHARDS = 64
LAYERS = 61
EXPERTS = 384
HIDDEN = 7168
MOE_INTER = 2048
DENSE_INTER = 18432
VOCAB = 163840
SIZES = {"I32": 4, "BF16": 2, "F32": 4}


def tensors() -> list[tuple[str, str, list[int]]]:
    """Kimi-K2-like tensors (name, dtype, shape), in checkpoint order."""
    out: list[tuple[str, str, list[int]]] = [("model.embed_tokens.weight", "BF16", [VOCAB, HIDDEN])]
    for layer in range(LAYERS):
        p = f"model.layers.{layer}"
        out += [(f"{p}.input_layernorm.weight", "BF16", [HIDDEN]), (f"{p}.post_attention_layernorm.weight", "BF16", [HIDDEN]),
                (f"{p}.self_attn.q_a_proj.weight", "BF16", [1536, HIDDEN]), (f"{p}.self_attn.q_a_layernorm.weight", "BF16", [1536]),
                (f"{p}.self_attn.q_b_proj.weight", "BF16", [64 * 192, 1536]),
                (f"{p}.self_attn.kv_a_proj_with_mqa.weight", "BF16", [576, HIDDEN]),
                (f"{p}.self_attn.kv_a_layernorm.weight", "BF16", [512]), (f"{p}.self_attn.kv_b_proj.weight", "BF16", [64 * 256, 512]),
                (f"{p}.self_attn.o_proj.weight", "BF16", [HIDDEN, 64 * 128])]
        if layer == 0:
            out += [(f"{p}.mlp.{w}.weight", "BF16", s) for w, s in
                    (("gate_proj", [DENSE_INTER, HIDDEN]), ("up_proj", [DENSE_INTER, HIDDEN]), ("down_proj", [HIDDEN, DENSE_INTER]))]
            continue
        out += [(f"{p}.mlp.gate.weight", "BF16", [EXPERTS, HIDDEN]), (f"{p}.mlp.gate.e_score_correction_bias", "F32", [EXPERTS])]
        for w, (rows, cols) in (("gate_proj", (MOE_INTER, HIDDEN)), ("up_proj", (MOE_INTER, HIDDEN)), ("down_proj", (HIDDEN, MOE_INTER))):
            out.append((f"{p}.mlp.shared_experts.{w}.weight", "BF16", [rows, cols]))
        for e in range(EXPERTS):
            for w, (rows, cols) in (("gate_proj", (MOE_INTER, HIDDEN)), ("up_proj", (MOE_INTER, HIDDEN)), ("down_proj", (HIDDEN, MOE_INTER))):
                q = f"{p}.mlp.experts.{e}.{w}"
                out += [(f"{q}.weight_packed", "I32", [rows, cols // 8]), (f"{q}.weight_scale", "BF16", [rows, cols // 32]),
                        (f"{q}.weight_shape", "I32", [2])]
    out += [("model.norm.weight", "BF16", [HIDDEN]), ("lm_head.weight", "BF16", [VOCAB, HIDDEN])]
    return out


def nbytes(dtype: str, shape: list[int]) -> int:
    n = SIZES[dtype]
    for d in shape:
        n *= d
    return n


def make(folder: Path) -> tuple[int, int]:
    """The sparse checkpoint; (bytes on paper, tensors)."""
    all_t = tensors()
    per = -(-len(all_t) // SHARDS)
    total = 0
    weight_map: dict[str, str] = {}
    for i in range(SHARDS):
        name = f"model-{i + 1:05d}-of-{SHARDS:06d}.safetensors"
        header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
        off = 0
        for t, dtype, shape in all_t[i * per:(i + 1) * per]:
            size = nbytes(dtype, shape)
            header[t] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + size]}
            weight_map[t] = name
            off += size
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        with open(folder / name, "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            f.truncate(8 + len(raw) + off)  # the weights: a hole
        total += 8 + len(raw) + off
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    (folder / "config.json").write_text(json.dumps({"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": HIDDEN,
                                                    "num_hidden_layers": LAYERS, "n_routed_experts": EXPERTS, "vocab_size": VOCAB}))
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "TikTokenTokenizer", "model_max_length": 262144}))
    (folder / "tiktoken.model").write_bytes(os.urandom(2_795_286))  # the size of Kimi-K2's
    return total, len(all_t)


def subprocess_run(folder: Path, cache: str) -> dict[str, Any]:
    t = time.monotonic()
    done = subprocess.run([sys.executable, str(HELPER)], input=json.dumps({"folder": str(folder), "cache": cache}).encode(),
                          capture_output=True, check=True)
    answer = dict(json.loads(done.stdout.decode().strip().splitlines()[-1]))
    answer["wall"] = time.monotonic() - t
    return answer


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", help="where to make the checkpoint (default: a temporary folder)")
    p.add_argument("--keep", action="store_true", help="keep the checkpoint")
    args = p.parse_args()
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="servelab-k25-"))
    folder = base / "Kimi-K2.5"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        t = time.monotonic()
        total, count = make(folder)
        used = sum(os.stat(folder / n).st_blocks * 512 for n in os.listdir(folder))
        print(f"checkpoint: {SHARDS} shards, {count} tensors, {total / 1e9:.0f} GB on paper, {used / 1e6:.1f} MB on disk "
              f"(made in {time.monotonic() - t:.1f} s)")
        cache = str(base / "cache.json")
        reader = weightprint.Reader()
        cold = weightprint.cached_fingerprint(str(folder), cache, reader)
        warm = weightprint.cached_fingerprint(str(folder), cache)
        print(f"in process  cold: {cold['bytes_read'] / 1e6:.2f} MB read, {cold['seconds']:.3f} s; "
              f"warm: {warm['bytes_read'] / 1e6:.2f} MB read, {warm['seconds']:.4f} s (cached: {warm['cached']})")
        os.remove(cache)
        c2, w2 = subprocess_run(folder, cache), subprocess_run(folder, cache)
        print(f"as the host runs it (python weightprint.py)  cold: {c2['bytes_read'] / 1e6:.2f} MB read, {c2['wall']:.3f} s; "
              f"warm: {w2['bytes_read'] / 1e6:.2f} MB read, {w2['wall']:.3f} s")
        assert cold["fingerprint"] == warm["fingerprint"] == c2["fingerprint"] == w2["fingerprint"]
        print(f"fingerprint {cold['fingerprint']} (layout {cold['layout']}, weights {cold['weights']}, "
              f"config {cold['config']}, tokenizer {cold['tokenizer']})")
    finally:
        if not args.keep:
            shutil.rmtree(base if not args.dir else folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
