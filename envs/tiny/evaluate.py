"""Offline acceptance of a head on the target's own greedy output (what vLLM measures, per position).

Greedy chain drafting accepts draft k at a step only when drafts 0..k all equal the target's tokens,
and then the head's inputs were those very tokens. So running the unrolled head teacher-forced on
the target's greedy continuation gives exactly the per-position acceptance of greedy serving.
"""

from __future__ import annotations

from typing import Any

import torch

from eagle3 import Head


@torch.no_grad()
def continuation(target: Any, prompt_ids: list[int], n: int) -> list[int]:
    out = target.generate(torch.tensor([prompt_ids]), max_new_tokens=n, do_sample=False, pad_token_id=target.config.pad_token_id)
    return [int(x) for x in out[0].tolist()]


@torch.no_grad()
def per_position(target: Any, head: Head, vocab: torch.Tensor, aux_ids: tuple[int, ...], seqs: list[tuple[int, list[int]]], k: int) -> list[float]:
    """seqs: (prompt length, prompt + continuation ids). Acceptance rate of draft position 1..k."""
    hit = [0] * k
    tot = 0
    for plen, ids in seqs:
        x = torch.tensor([ids])
        o = target(input_ids=x, output_hidden_states=True)
        aux = torch.cat([o.hidden_states[i] for i in aux_ids], -1)
        steps = head.unroll(target.model.embed_tokens, x, aux, k)
        # a drafting step at index t (the last accepted token is t+1) inside the continuation
        for t in range(plen - 2, len(ids) - 2 - k):
            tot += 1
            for j in range(k):
                if int(vocab[steps[j][0, t].argmax()]) != ids[t + 2 + j]:
                    break
                hit[j] += 1
    return [h / tot for h in hit] if tot else [0.0] * k
