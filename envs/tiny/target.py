"""The tiny target: a byte-level BPE and a 4-layer Llama trained on the pinned corpus.

Deterministic: the tokenizer is trained on the corpus in a fixed order, batches are drawn from a
seeded generator and torch runs on a fixed number of threads, so one machine type always writes
the same files.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch

import corpus as corpus_mod
import data
import tinymodel

VOCAB_SIZE = 1024
SEQ = 128
#: Steps of 8 windows of SEQ tokens: ~10 passes over the corpus slice, enough to recite it.
STEPS = 900
ARCH: dict[str, int] = {
    "hidden_size": 192,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 3,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "max_position_embeddings": 1024,
}


@dataclass
class Streams:
    """Token id streams, one per (domain, form)."""

    ids: dict[tuple[str, str], torch.Tensor]

    def pick(self, domains: tuple[str, ...], forms: tuple[str, ...]) -> list[torch.Tensor]:
        return [t for (d, f), t in sorted(self.ids.items()) if d in domains and f in forms]


def build_tokenizer(c: corpus_mod.Corpus) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=tinymodel.UNK))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[*tinymodel.SPECIAL_TOKENS.values(), *tinymodel.ROLE_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    chat = [data.chat_style(p) for t in c.prose for p in data.paragraphs(t)]
    tok.train_from_iterator([*c.prose, *c.code, *chat], trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, **tinymodel.SPECIAL_TOKENS,
        additional_special_tokens=tinymodel.ROLE_TOKENS, model_max_length=ARCH["max_position_embeddings"],
    )
    fast.chat_template = tinymodel.CHAT_TEMPLATE
    return fast


def streams(tok: Any, c: corpus_mod.Corpus, seed: int) -> Streams:
    out: dict[tuple[str, str], torch.Tensor] = {}
    eos = tok.eos_token_id
    for domain, texts in (("prose", c.prose), ("code", c.code)):
        raw: list[int] = []
        for t in texts:
            raw += [tok.bos_token_id, *tok(t, add_special_tokens=False)["input_ids"], eos]
        chat: list[int] = []
        for conv in data.chat_examples(texts, seed):
            chat += tok(tok.apply_chat_template(conv, tokenize=False), add_special_tokens=False)["input_ids"]
        out[(domain, "raw")] = torch.tensor(raw, dtype=torch.long)
        out[(domain, "chat")] = torch.tensor(chat, dtype=torch.long)
    return Streams(out)


def batches(parts: list[torch.Tensor], steps: int, batch: int, seed: int, seq: int = SEQ) -> list[torch.Tensor]:
    """``steps`` batches of windows, each window from a part in proportion to its length."""
    g = torch.Generator().manual_seed(seed)
    sizes = torch.tensor([max(1, len(p) - seq - 1) for p in parts], dtype=torch.float)
    out = []
    for _ in range(steps):
        which = torch.multinomial(sizes, batch, replacement=True, generator=g)
        rows = []
        for w in which.tolist():
            start = int(torch.randint(0, int(sizes[w]), (1,), generator=g))
            rows.append(parts[w][start : start + seq + 1])
        out.append(torch.stack(rows))
    return out


def lr_at(step: int, steps: int, peak: float, warmup: int = 20) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup))) * 0.9 + peak * 0.1


def train_llama(tok: Any, arch: dict[str, int], parts: list[torch.Tensor], steps: int, seed: int,
                batch: int = 8, peak_lr: float = 3e-3, log: Any = print) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tok), **arch,
        **{f"{n}_id": getattr(tok, f"{n}_id") for n in ("bos_token", "eos_token", "pad_token")},
        tie_word_embeddings=False, torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    opt = torch.optim.AdamW(model.parameters(), lr=peak_lr, betas=(0.9, 0.95), weight_decay=0.01)
    t0 = time.monotonic()
    for step, xb in enumerate(batches(parts, steps, batch, seed)):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, peak_lr)
        loss = model(input_ids=xb[:, :-1], labels=xb[:, :-1]).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 50 == 0 or step == steps - 1:
            log(f"  step {step}/{steps} loss {loss.item():.3f} ({time.monotonic() - t0:.0f} s)")
    model.eval()
    return model
