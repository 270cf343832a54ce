"""What a drafter's weights say it is, from its safetensors headers (names and shapes), not its config.

The config of an EAGLE head cannot tell EAGLE-1 from EAGLE-3 (both publish ``LlamaForCausalLM``), and a
config is edited by hand more often than its weights. The shapes decide:

- EAGLE-3 (SafeAILab ``cnets.py``, SpecForge, speculators): layer 0 attends over the embeddings and the
  fused hidden state side by side (``q_proj`` takes 2×hidden), ``fc`` fuses k target hidden states
  (``fc.weight`` [hidden, k×target_hidden]), the head has its own ``lm_head`` [draft_vocab, hidden]
  and a ``d2t`` map when the draft vocabulary is pruned;
- EAGLE-1 (``cnets1.py``): ``fc`` takes the embedding and one hidden state (``fc.weight``
  [hidden, 2×hidden]), layer 0 attends over hidden, no ``lm_head`` of its own, no ``d2t``.
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.engines.drafter.facts import ModelFacts


@dataclass(frozen=True)
class WeightShapes:
    """Shapes read from the headers; None where the headers do not say."""

    kind: str | None  # "eagle3", "eagle1" or None
    hidden: int | None  # the drafter's own hidden size (fc rows, lm_head columns)
    fc_in: int | None
    lm_head_rows: int | None
    q_in: int | None
    has_d2t: bool
    evidence: str

    def fused(self, target_hidden: int) -> int | None:
        """How many states of width ``target_hidden`` fc fuses, when it divides evenly."""
        if self.fc_in is None or not target_hidden or self.fc_in % target_hidden:
            return None
        return self.fc_in // target_hidden


def _shape(d: ModelFacts, *names: str) -> tuple[int, ...] | None:
    for n in names:
        t = d.tensor(n)
        if t is not None:
            return tuple(t[1].shape)
    return None


def read_shapes(d: ModelFacts) -> WeightShapes | None:
    """The drafter's weight shapes, or None when it has no readable safetensors header."""
    if not d.headers:
        return None
    names = d.tensor_names()
    fc = _shape(d, "fc.weight", "model.fc.weight")
    head = _shape(d, "lm_head.weight")
    q = next((tuple(d.tensor(n)[1].shape) for n in sorted(names) if n.endswith("self_attn.q_proj.weight") and d.tensor(n) is not None), None)  # type: ignore[index]
    hidden = fc[0] if fc and len(fc) == 2 else head[1] if head and len(head) == 2 else None
    fc_in = fc[1] if fc and len(fc) == 2 else None
    q_in = q[1] if q and len(q) == 2 else None
    has_d2t = "d2t" in names
    kind: str | None = None
    if hidden and q_in:
        kind = "eagle3" if q_in == 2 * hidden else "eagle1" if q_in == hidden and fc_in == 2 * hidden else None
    if kind is None and hidden and fc_in:
        if any(n.startswith("midlayer.") for n in names) or has_d2t or (fc_in != 2 * hidden and fc_in % hidden == 0):
            kind = "eagle3"
        elif fc_in == 2 * hidden and head is None:
            kind = "eagle1"
    parts = [f"fc.weight {list(fc)}" if fc else "no fc.weight"]
    if q:
        parts.append(f"layer-0 q_proj {list(q)}")
    parts.append(f"lm_head.weight {list(head)}" if head else "no lm_head")
    parts.append("d2t present" if has_d2t else "no d2t")
    return WeightShapes(kind=kind, hidden=hidden, fc_in=fc_in, lm_head_rows=head[0] if head else None, q_in=q_in,
                        has_d2t=has_d2t, evidence="weights: " + ", ".join(parts))
