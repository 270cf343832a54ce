"""MTP (NextN) set-ups and the tokens drafted per step: the target's own MTP layers, read from its
config through the engine's rewrite (``EngineRules.mtp``) and from its checkpoint's weight names, and
``num_tokens`` against what the drafter records."""

from __future__ import annotations

import re

from servelab.engines.drafter.case import DrafterCase
from servelab.engines.drafter.findings import Finding
from servelab.engines.drafter.rules import EngineRules

#: Over the names joined by newlines (one C-speed pass each; an index holds ~100k names):
#: a decoder layer's index, an ``mtp.layers.{i}``/``mtp_layers.{i}`` block, a bare ``mtp.`` block, and the
#: tensors only an MTP (NextN) layer has (the norms of the embedding and the hidden state, their projection).
_LAYER = re.compile(r"layers\.(\d+)\.")  # each pattern starts with a literal: the engine's fast search
_MTP_LAYER = re.compile(r"mtp(?:_layers|\.layers)\.(\d+)\.")
_BARE_MTP = re.compile(r"mtp\.(?!layers\.)")
_MARKED = re.compile(r"layers\.(\d+)\.(?:enorm|hnorm|eh_proj)\.")


def mtp_layers_present(names: frozenset[str], num_layers: int) -> set[int]:
    """Which MTP layers (0-based) the weights hold: ``layers.{N+i}`` past the decoder (DeepSeek, GLM),
    ``mtp.layers.{i}`` / ``mtp_layers.{i}`` (Qwen3-Next, Qwen3.5, MiMo), a bare ``mtp.`` block (one layer),
    or, in a separate NextN checkpoint, one layer per distinct layer index carrying ``enorm``/``hnorm``/``eh_proj``."""
    text = "\n".join(names)
    out: set[int] = set(range(len(set(_MARKED.findall(text)))))
    out.update(int(i) for i in set(_MTP_LAYER.findall(text)))
    if _BARE_MTP.search(text):
        out.add(0)
    out.update(i - num_layers for i in {int(x) for x in set(_LAYER.findall(text))} if i >= num_layers)
    return out


def mtp(case: DrafterCase, rules: EngineRules) -> list[Finding]:
    r = rules.mtp
    if case.method != "mtp" or r is None:
        return []
    t = case.target
    if not r.supported:
        return [Finding(
            "mtp-unsupported", "error",
            f"{rules.engine} {rules.version or ''} has no MTP model for model type {t.text_model_type!r} ({', '.join(t.architectures) or '?'}): "
            "the target has no MTP layers it can serve".replace("  ", " "),
            r.evidence, "use a target with MTP layers (DeepSeek-V3, GLM-4.5, Qwen3-Next, MiMo, ...) or another method (eagle3, draft_model, ngram)",
        )]
    n = t.num_layers or 0
    names = t.weight_names
    held = mtp_layers_present(names, n) if names is not None else None
    held_txt = (f"; the weights ({t.weight_names_source}) hold MTP layer(s) {sorted(held)}" if held else
                f"; the weights ({t.weight_names_source}) hold no MTP tensor" if held is not None else "")
    key = r.count_key or "num_nextn_predict_layers"
    if r.n_predict is None or r.n_predict <= 0:
        zero = r.n_predict == 0
        if not zero and held is None or not zero and held:  # absent, and the weights show MTP layers or cannot be read
            return [Finding("mtp-layers-missing", "warning", f"the target's config has no {key}; {rules.engine} reads the MTP layer count from it",
                            r.evidence + held_txt, f"write {key} = {len(held) if held else 'the MTP layers the checkpoint holds'} into the target's config.json")]
        return [Finding(
            "mtp-layers-missing", "error",
            f"the target's config records {'0' if zero else 'no'} MTP layers ({key}{' = 0' if zero else ' absent'}): {rules.engine} would build an MTP draft with no layer",
            r.evidence + held_txt,
            f"set {key} to the MTP layers the checkpoint really holds" if held else "use a checkpoint that ships its MTP layers, or another method",
        )]
    if held is None:
        return []
    missing = [i for i in range(r.n_predict) if i not in held]
    if not missing:
        return []
    where = ", ".join(f"layers.{n + i} / mtp.layers.{i}" for i in missing[:3])
    return [Finding(
        "mtp-weights-missing", "error",
        f"the target's config records {r.n_predict} MTP layer(s) ({key}), but the checkpoint has no tensor of MTP layer(s) {missing}: {r.architecture} would load without them",
        f"{t.path}/{t.weight_names_source}: {len(names or ())} tensors, none under {where}; {r.evidence}",
        "use the checkpoint as published with its MTP layers (some re-quantized copies drop them), or another method",
    )]


def num_tokens(case: DrafterCase, rules: EngineRules) -> list[Finding]:
    k = case.num_tokens
    if k is None:
        return []
    out: list[Finding] = []
    r = rules.mtp
    if case.method == "mtp" and r is not None and r.supported and r.n_predict:
        n = r.n_predict
        if k > n and k % n and r.tokens_divisible:
            out.append(Finding(
                "num-tokens-mismatch", "error", f"num_tokens {k} is above the target's {n} MTP layer(s) and not a multiple of it: {rules.engine} refuses it",
                f"{r.evidence}; num_speculative_tokens must be divisible by n_predict={n}", f"set num_tokens to {n} or a multiple of it",
            ))
        elif k > n and r.reuse_warning:  # only where the engine itself warns (vLLM); SGLang's NextN steps reuse the layer by design
            out.append(Finding(
                "num-tokens-mismatch", "warning", f"num_tokens {k} runs the target's {n} MTP layer(s) {k // n} times a step: acceptance falls past position {n}",
                r.evidence + "; the engine warns that it reuses the same MTP layer", f"compare with num_tokens = {n}",
            ))
    recorded = case.drafter.recorded_tokens
    if recorded is not None and k > recorded:
        out.append(Finding(
            "num-tokens-mismatch", "warning", f"num_tokens {k} is more than the {recorded} the drafter was built to propose: positions past {recorded} accept less",
            f"{case.drafter.path}/config.json speculators_config.proposal_methods speculative_tokens={recorded}", f"set num_tokens to {recorded} or fewer",
        ))
    return out
