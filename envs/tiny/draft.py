"""A small draft model (``draft_model``): a 2-layer Llama on the target's tokenizer, trained on the
target's own greedy continuations, as a distilled draft model is."""

from __future__ import annotations

from typing import Any

import torch

import target as target_mod

ARCH: dict[str, int] = {
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "max_position_embeddings": target_mod.ARCH["max_position_embeddings"],
}


def train(tok: Any, parts: list[torch.Tensor], steps: int, seed: int, log: Any = print) -> Any:
    return target_mod.train_llama(tok, ARCH, parts, steps, seed, batch=8, peak_lr=3e-3, log=log)
