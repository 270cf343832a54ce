"""Create the tiny Llama that the CPU experiments serve: `python engines/tinymodel.py OUT_DIR`.

Two drafters whose acceptance is known in advance come from the same script, so the diagnosis
can be proven on a real engine: ``--seed N`` writes another random Llama with the same tokenizer
(as a ``draft_model`` it is accepted ~never), and ``--eagle3 TARGET_DIR`` writes a random-weight
one-layer EAGLE-3 drafter sized for that target, with explicit aux layer ids (served, ~0 %).

Run with the ENGINE interpreter (it needs torch/transformers/tokenizers, which the app does not
have). Everything is deterministic: the tokenizer is trained on the fixed sentences below and the
weights come from a fixed seed, so two machines get byte-identical files and the same greedy output.
The model is random, so its text is nonsense, but vLLM serves it through the real code paths
(chat template, streaming, speculative decoding) in about a minute on two CPU cores.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

SEED = 20260
VOCAB_SIZE = 512
LAYERS = 2
MAX_POSITIONS = 2048
#: The Llama's sizes, in LlamaConfig's names (its vocabulary size is the tokenizer's).
ARCH: dict[str, int] = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "max_position_embeddings": MAX_POSITIONS,
}

BOS, EOS, UNK, PAD = "<s>", "</s>", "<unk>", "<pad>"
#: The tokenizer's special tokens by their transformers name (``bos_token``...), in vocabulary order.
SPECIAL_TOKENS = {"bos_token": BOS, "eos_token": EOS, "unk_token": UNK, "pad_token": PAD}
ROLE_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>"]

# A model-agnostic chat template: role marker, content, end of turn. vLLM's chat endpoint renders it.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + eos_token + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)

# Written for this project; enough variety (prose, code, numbers) for a useful byte-level BPE.
SENTENCES = [
    "The operator watches the server load its weights and waits for the first token.",
    "Speculative decoding drafts a few tokens cheaply and the target model verifies them at once.",
    "When the draft is right, several tokens arrive in one step; when it is wrong, one step is lost.",
    "Please summarise the following paragraph in two sentences for a busy reader.",
    "Translate into French: the cat sleeps on the warm windowsill every afternoon.",
    "Le chat dort sur le rebord de la fenetre chaque apres-midi.",
    "Extract the names, dates and amounts from this invoice and return them as JSON.",
    "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
    "for i in range(10): print(i * i)",
    "If a train travels 120 km in 1.5 hours, its average speed is 80 km per hour.",
    "What is 17 times 23? It is 391, because 17 * 20 = 340 and 17 * 3 = 51.",
    "Hello! How are you today? I am fine, thank you, and ready to help.",
    "A good benchmark repeats each measurement and reports the median and the spread.",
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "{\"name\": \"Ada\", \"year\": 1843, \"topic\": \"analytical engine\"}",
    "SELECT name, count(*) FROM runs WHERE engine = 'vllm' GROUP BY name;",
    "Acceptance rate is accepted tokens divided by drafted tokens; length adds one bonus token.",
    "Throughput is measured in output tokens per second across all requests.",
    "Answer briefly, then explain your reasoning step by step.",
    "Water boils at 100 degrees Celsius at sea level and freezes at 0 degrees.",
]


def build_tokenizer() -> Any:
    """Train a byte-level BPE on SENTENCES and wrap it as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[*SPECIAL_TOKENS.values(), *ROLE_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(SENTENCES * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        **SPECIAL_TOKENS,
        additional_special_tokens=ROLE_TOKENS,
        model_max_length=MAX_POSITIONS,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(tokenizer: Any, seed: int = SEED) -> Any:
    """A 2-layer Llama with random weights drawn from ``seed``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        **ARCH,
        **{f"{name}_id": getattr(tokenizer, f"{name}_id") for name in ("bos_token", "eos_token", "pad_token")},
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.eval()
    return model


#: Aux layer ids of the EAGLE-3 drafter. vLLM taps id j as the input of layer j (0 = the
#: embeddings, LAYERS = the last layer's output), so a 2-layer target has exactly 0, 1, 2; the
#: engine's default (2, N//2, N-3) names a layer it lacks and the fused width comes out wrong.
EAGLE3_AUX_IDS = [0, 1, 2]


def eagle3_tensors(target: dict[str, Any], seed: int) -> dict[str, Any]:
    """Random weights named as vLLM's ``llama_eagle3`` loads them (``midlayer.*``, ``fc``, ``lm_head``).

    No ``embed_tokens``: the drafter shares the target's. The draft vocab equals the target's, so
    no ``d2t``/``t2d`` map is needed.
    """
    import torch

    hidden = int(target["hidden_size"])
    heads, kv_heads = int(target["num_attention_heads"]), int(target["num_key_value_heads"])
    head_dim = int(target.get("head_dim") or hidden // heads)
    inter, vocab = int(target["intermediate_size"]), int(target["vocab_size"])
    gen = torch.Generator().manual_seed(seed)

    def rnd(*shape: int) -> Any:
        return torch.randn(*shape, generator=gen) * 0.02

    return {
        "midlayer.self_attn.q_proj.weight": rnd(heads * head_dim, 2 * hidden),
        "midlayer.self_attn.k_proj.weight": rnd(kv_heads * head_dim, 2 * hidden),
        "midlayer.self_attn.v_proj.weight": rnd(kv_heads * head_dim, 2 * hidden),
        "midlayer.self_attn.o_proj.weight": rnd(hidden, heads * head_dim),
        "midlayer.mlp.gate_proj.weight": rnd(inter, hidden),
        "midlayer.mlp.up_proj.weight": rnd(inter, hidden),
        "midlayer.mlp.down_proj.weight": rnd(hidden, inter),
        "midlayer.input_layernorm.weight": torch.ones(hidden),
        "midlayer.hidden_norm.weight": torch.ones(hidden),
        "midlayer.post_attention_layernorm.weight": torch.ones(hidden),
        "norm.weight": torch.ones(hidden),
        "fc.weight": rnd(hidden, len(EAGLE3_AUX_IDS) * hidden),
        "lm_head.weight": rnd(vocab, hidden),
    }


def eagle3_config(target: dict[str, Any]) -> dict[str, Any]:
    """The drafter's config.json: one layer, the target's sizes, explicit aux ids."""
    keys = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
            "vocab_size", "max_position_embeddings", "rms_norm_eps", "bos_token_id", "eos_token_id", "pad_token_id")
    cfg: dict[str, Any] = {k: target[k] for k in keys if k in target}
    cfg.update(
        architectures=["LlamaForCausalLMEagle3"],
        model_type="llama",
        num_hidden_layers=1,
        draft_vocab_size=target["vocab_size"],
        target_hidden_size=target["hidden_size"],
        tie_word_embeddings=False,
        torch_dtype="float32",
        eagle_config={"eagle_aux_hidden_state_layer_ids": list(EAGLE3_AUX_IDS), "use_aux_hidden_state": True},
    )
    return cfg


def _write_eagle3(staging: Path, target_dir: Path, seed: int) -> None:
    import json

    from safetensors.torch import save_file

    target = json.loads((target_dir / "config.json").read_text())
    (staging / "config.json").write_text(json.dumps(eagle3_config(target), indent=2, sort_keys=True) + "\n")
    save_file(eagle3_tensors(target, seed), str(staging / "model.safetensors"), metadata={"format": "pt"})


def create(out_dir: Path, seed: int = SEED, eagle3_target: Path | None = None) -> Path:
    """Write the model into out_dir atomically (a half-written folder never looks complete).

    ``eagle3_target``: write an EAGLE-3 drafter for that target instead of a Llama.
    """
    out_dir = out_dir.resolve()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tiny-llama-", dir=out_dir.parent))
    try:
        if eagle3_target is not None:
            _write_eagle3(staging, eagle3_target, seed)
        else:
            tokenizer = build_tokenizer()
            model = build_model(tokenizer, seed)
            tokenizer.save_pretrained(staging)
            model.save_pretrained(staging, safe_serialization=True)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        staging.chmod(0o755)
        os.replace(staging, out_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return out_dir


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="tinymodel.py", description="write the tiny Llama (or a drafter for it)")
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=SEED, help="weights seed (another seed: a drafter that never agrees)")
    parser.add_argument("--eagle3", metavar="TARGET_DIR", help="write a random EAGLE-3 drafter for this target instead")
    args = parser.parse_args(argv)
    out = create(Path(args.out_dir), args.seed, Path(args.eagle3) if args.eagle3 else None)
    print(f"{'EAGLE-3 drafter' if args.eagle3 else 'tiny model'} written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
