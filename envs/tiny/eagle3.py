"""An EAGLE-3 head for the tiny target, trained the way SpecForge trains one, in plain torch.

The head is what vLLM's ``llama_eagle3`` runs, written here so that training and serving compute
the same function:

- ``fc`` fuses three aux hidden states of the target (id j: the residual stream after j layers);
- one decoder layer whose attention reads ``[input_layernorm(embed(token)), hidden_norm(h)]``;
- ``norm`` and ``lm_head`` over a pruned draft vocabulary, mapped back by ``d2t`` (offsets).

Training-time test (EAGLE-3): the head is unrolled over ``TTT`` steps. Step 0 reads the target's
fused states; step k reads the head's own pre-norm output of step k-1, sits k positions further
on, and attends to step 0's keys up to its position plus its own earlier steps' keys at that
position, which is the cache it sees when it drafts token k. Each step is trained against the
target's own next-token distribution (soft labels), weighted 0.8**k. The training text is the
target's own greedy continuations of corpus openings (``self_data``), as SpecForge regenerates its data.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

#: Training-time-test steps (the served K of the working pair is 2; positions past 3 are untrained).
TTT = 3
DRAFT_VOCAB = 512


def rms(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if weight is None else y * weight


def rope(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """Neox-style rotary embedding (HF ``rotate_half``), x: [B, heads, T, D], pos: [T]."""
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    ang = pos.float()[:, None] * inv[None, :]
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


@dataclass(frozen=True)
class HeadShape:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    inter: int
    n_aux: int
    draft_vocab: int
    eps: float
    theta: float


class Head(nn.Module):
    def __init__(self, s: HeadShape, aux_norm: bool = False) -> None:
        super().__init__()
        self.s, self.aux_norm = s, aux_norm
        h = s.hidden
        self.fc = nn.Linear(s.n_aux * h, h, bias=False)
        self.q_proj = nn.Linear(2 * h, s.heads * s.head_dim, bias=False)
        self.k_proj = nn.Linear(2 * h, s.kv_heads * s.head_dim, bias=False)
        self.v_proj = nn.Linear(2 * h, s.kv_heads * s.head_dim, bias=False)
        self.o_proj = nn.Linear(s.heads * s.head_dim, h, bias=False)
        self.gate_proj = nn.Linear(h, s.inter, bias=False)
        self.up_proj = nn.Linear(h, s.inter, bias=False)
        self.down_proj = nn.Linear(s.inter, h, bias=False)
        self.input_layernorm = nn.Parameter(torch.ones(h))
        self.hidden_norm = nn.Parameter(torch.ones(h))
        self.post_attention_layernorm = nn.Parameter(torch.ones(h))
        self.norm = nn.Parameter(torch.ones(h))
        self.lm_head = nn.Linear(h, s.draft_vocab, bias=False)

    def fuse(self, aux: torch.Tensor) -> torch.Tensor:
        if self.aux_norm:  # SGLang's legacy ``use_aux_norm``: an RMSNorm per fused state
            aux = torch.cat([rms(c, None, self.s.eps) for c in aux.chunk(self.s.n_aux, -1)], -1)
        return self.fc(aux)

    def qkv(self, emb: torch.Tensor, h: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, ...]:
        s = self.s
        x = torch.cat([rms(emb, self.input_layernorm, s.eps), rms(h, self.hidden_norm, s.eps)], -1)
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, s.heads, s.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, s.kv_heads, s.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, s.kv_heads, s.head_dim).transpose(1, 2)
        rep = s.heads // s.kv_heads
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        return rope(q, pos, s.theta), rope(k, pos, s.theta), v

    def finish(self, attn: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """attention output [B,T,H] and the step's input hidden (the residual) -> (logits, pre-norm out)."""
        r2 = self.o_proj(attn) + h
        x = rms(r2, self.post_attention_layernorm, self.s.eps)
        r3 = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x)) + r2
        return self.lm_head(rms(r3, self.norm, self.s.eps)), r3

    def unroll(self, embed: nn.Embedding, ids: torch.Tensor, aux: torch.Tensor, steps: int) -> list[torch.Tensor]:
        """Logits of each TTT step: step k at index t predicts token t+2+k. ids: [B,L], aux: [B,L,n*H]."""
        b, L = ids.shape
        t_n = L - 1  # index t reads token t+1
        h = self.fuse(aux[:, :t_n])
        base = torch.arange(t_n)
        causal = torch.ones(t_n, t_n, dtype=torch.bool).tril()
        k0 = v0 = None
        diag_k: list[torch.Tensor] = []
        diag_v: list[torch.Tensor] = []
        out = []
        scale = 1.0 / math.sqrt(self.s.head_dim)
        for k in range(steps):
            n = t_n - k  # indices whose input token t+1+k exists
            emb = embed(ids[:, 1 + k : 1 + k + n])
            hk = h[:, :n]
            q, kk, vv = self.qkv(emb, hk, base[:n] + k)
            if k == 0:
                k0, v0 = kk, vv
                s0 = (q @ k0.transpose(-1, -2)) * scale
                s0 = s0.masked_fill(~causal, float("-inf"))
                attn = torch.softmax(s0, -1) @ v0
            else:
                assert k0 is not None and v0 is not None
                diag_k = [d[:, :, :n] for d in diag_k] + [kk]
                diag_v = [d[:, :, :n] for d in diag_v] + [vv]
                s0 = (q @ k0[:, :, :n].transpose(-1, -2)) * scale
                s0 = s0.masked_fill(~causal[:n, :n], float("-inf"))
                sd = torch.stack([(q * d).sum(-1) for d in diag_k], -1) * scale
                w = torch.softmax(torch.cat([s0, sd], -1), -1)
                attn = w[..., :n] @ v0[:, :, :n] + sum(w[..., n + j, None] * diag_v[j] for j in range(len(diag_v)))
            logits, r3 = self.finish(attn.transpose(1, 2).reshape(b, n, -1), hk)
            out.append(logits)
            h = r3
        return out


def draft_vocab(counts: torch.Tensor, size: int = DRAFT_VOCAB) -> torch.Tensor:
    """The ``size`` most frequent target ids (ties: lower id first), ascending."""
    order = sorted(range(len(counts)), key=lambda i: (-int(counts[i]), i))[:size]
    return torch.tensor(sorted(order), dtype=torch.long)


@dataclass
class TrainSpec:
    steps: int
    seed: int
    aux_ids: tuple[int, ...]
    aux_norm: bool = False
    batch: int = 8
    seq: int = 96
    lr: float = 3e-3
    #: Also return a copy of the head after this many steps (the under-trained variant).
    snapshot_at: int | None = None


@torch.no_grad()
def self_data(target: Any, parts: list[torch.Tensor], n: int, seed: int, prompt_len: int = 24, new: int = 72, chunk: int = 64) -> list[torch.Tensor]:
    """The target's own greedy continuations of ``n`` corpus openings (SpecForge regenerates its data
    with the target the same way): the head learns the text it will be asked to draft."""
    import target as target_mod

    prompts = torch.cat(target_mod.batches(parts, 1, n, seed, prompt_len - 1))
    out = []
    for i in range(0, n, chunk):
        x = prompts[i : i + chunk]
        g = target.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=new, min_new_tokens=new, do_sample=False,
                            pad_token_id=target.config.pad_token_id)
        out.append(g)
    return [torch.cat(out).reshape(-1)]


def train(target: Any, parts: list[torch.Tensor], vocab: torch.Tensor, spec: TrainSpec, log: Any = print) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor] | None]:
    """Train a head on the target's hidden states over ``parts``; its tensors (and the snapshot's)."""
    import target as target_mod

    cfg = target.config
    shape = HeadShape(cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim,
                      cfg.intermediate_size, len(spec.aux_ids), len(vocab), cfg.rms_norm_eps, float(getattr(cfg, "rope_theta", 10000.0)))
    torch.manual_seed(spec.seed)
    head = Head(shape, spec.aux_norm)
    with torch.no_grad():  # start from the target's own output layer, restricted to the draft vocab
        head.lm_head.weight.copy_(target.lm_head.weight[vocab])
        head.norm.copy_(target.model.norm.weight)
    embed = target.model.embed_tokens
    opt = torch.optim.AdamW(head.parameters(), lr=spec.lr, betas=(0.9, 0.95), weight_decay=0.0)
    snap = None
    t0 = time.monotonic()
    for step, xb in enumerate(target_mod.batches(parts, spec.steps, spec.batch, spec.seed, spec.seq)):
        for g in opt.param_groups:
            g["lr"] = target_mod.lr_at(step, spec.steps, spec.lr, warmup=10)
        with torch.no_grad():
            o = target(input_ids=xb, output_hidden_states=True)
            aux = torch.cat([o.hidden_states[i] for i in spec.aux_ids], -1)
            probs = torch.softmax(o.logits[..., vocab], -1)
        loss = torch.zeros(())
        for k, logits in enumerate(head.unroll(embed, xb, aux, TTT)):
            n = logits.shape[1] - 1  # step k at index t predicts t+2+k: the target's distribution at t+1+k
            want = probs[:, 1 + k : 1 + k + n]
            loss = loss + (0.8 ** k) * -(want * F.log_softmax(logits[:, :n], -1)).sum(-1).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if spec.snapshot_at is not None and step + 1 == spec.snapshot_at:
            snap = tensors(head, vocab)
        if step % 50 == 0 or step == spec.steps - 1:
            log(f"  head step {step}/{spec.steps} loss {loss.item():.3f} ({time.monotonic() - t0:.0f} s)")
    return tensors(head, vocab), snap


def tensors(head: Head, vocab: torch.Tensor) -> dict[str, torch.Tensor]:
    """The head's weights as vLLM's and SGLang's ``llama_eagle3`` load them."""
    h = {k: v.detach().clone().contiguous() for k, v in head.state_dict().items()}
    m = "midlayer."
    out = {
        "fc.weight": h["fc.weight"],
        m + "self_attn.q_proj.weight": h["q_proj.weight"],
        m + "self_attn.k_proj.weight": h["k_proj.weight"],
        m + "self_attn.v_proj.weight": h["v_proj.weight"],
        m + "self_attn.o_proj.weight": h["o_proj.weight"],
        m + "mlp.gate_proj.weight": h["gate_proj.weight"],
        m + "mlp.up_proj.weight": h["up_proj.weight"],
        m + "mlp.down_proj.weight": h["down_proj.weight"],
        m + "input_layernorm.weight": h["input_layernorm"],
        m + "hidden_norm.weight": h["hidden_norm"],
        m + "post_attention_layernorm.weight": h["post_attention_layernorm"],
        "norm.weight": h["norm"],
        "lm_head.weight": h["lm_head.weight"],
        "d2t": (vocab - torch.arange(len(vocab))).to(torch.long),
    }
    t2d = torch.zeros(int(vocab.max()) + 1, dtype=torch.bool)
    t2d[vocab] = True
    out["t2d"] = t2d
    return out


def config(target_cfg: dict[str, Any], aux_ids: tuple[int, ...], draft_vocab_size: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    keys = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
            "max_position_embeddings", "rms_norm_eps", "rope_theta", "bos_token_id", "eos_token_id", "pad_token_id")
    cfg: dict[str, Any] = {k: target_cfg[k] for k in keys if k in target_cfg}
    cfg.update(
        architectures=["LlamaForCausalLMEagle3"], model_type="llama", num_hidden_layers=1,
        draft_vocab_size=draft_vocab_size, target_hidden_size=target_cfg["hidden_size"], tie_word_embeddings=False,
        torch_dtype="float32",
        eagle_config={"eagle_aux_hidden_state_layer_ids": list(aux_ids), "use_aux_hidden_state": True},
    )
    cfg.update(extra or {})
    return cfg


def write(folder: Path, cfg: dict[str, Any], weights: dict[str, torch.Tensor]) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
