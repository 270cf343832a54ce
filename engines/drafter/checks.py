"""The drafter rules themselves: facts of drafter and target, one engine version's rules, findings.

Pure functions (no host, no engine): the same facts and rules always give the same findings, so
every code is tested with planted faults on real public configs.
"""

from __future__ import annotations

from servelab.engines.drafter.case import DrafterCase
from servelab.engines.drafter.facts import ModelFacts
from servelab.engines.drafter.findings import Finding
from servelab.engines.drafter.mtp import mtp, num_tokens
from servelab.engines.drafter.rules import EngineRules
from servelab.engines.drafter.weights import WeightShapes, read_shapes

#: Methods whose drafter consumes the target's hidden states (so hidden sizes must agree).
HIDDEN_METHODS = frozenset({"eagle", "eagle3", "mtp"})


__all__ = ["DrafterCase", "check", "is_eagle3"]


def check(case: DrafterCase, rules: EngineRules) -> list[Finding]:
    """Every finding for ``case`` under ``rules``, errors first."""
    out: list[Finding] = []
    for rule in (_unreadable, _path, _method_arch, _architecture, _config_weights, _vocab, _vocab_map, _hidden, _aux, _tokens, _context,
                 _norm_flags, mtp, num_tokens):
        out.extend(rule(case, rules))
    order = {"error": 0, "warning": 1, "info": 2}
    return sorted(out, key=lambda f: order[f.severity])


def is_eagle3(d: ModelFacts) -> bool | None:
    """Whether the drafter is an EAGLE-3 head (None: cannot tell): its weights decide, then its config."""
    w = read_shapes(d)
    if w is not None and w.kind is not None:
        return w.kind == "eagle3"
    if d.speculators_type is not None:
        return d.speculators_type == "eagle3"
    return _config_says_eagle3(d)


def _config_says_eagle3(d: ModelFacts) -> bool | None:
    archs = " ".join(d.architectures).lower()
    if "eagle3" in archs or d.aux_layer_ids is not None or "midlayer.hidden_norm.weight" in d.tensor_names():
        return True
    if "eagle" in archs:
        return False
    return None


def _unreadable(case: DrafterCase, rules: EngineRules) -> list[Finding]:
    return [
        Finding("drafter-unreadable", "warning", f"a drafter file could not be read: {p}", p, "check the drafter folder's safetensors files")
        for p in case.drafter.problems
    ]


def _path(case: DrafterCase, rules: EngineRules) -> list[Finding]:
    if case.method in rules.path_rule_exempt or not rules.path_rules:
        return []
    low = case.draft_path.lower()
    for rule in rules.path_rules:
        if rule.needle in low:
            if rule.method == case.method:
                return []
            return [Finding(
                "path-overrides-method", "error",
                f"{rules.engine} {rules.version or ''} loads this drafter as method '{rule.method}', not '{case.method}': its path contains {rule.needle!r}".replace("  ", " "),
                f"{case.draft_path}; {rules.path_rule_evidence}",
                f"move or symlink the drafter to a path without {rule.needle!r}, or set method = \"{rule.method}\" if that is what it is",
            )]
    return []


def _method_arch(case: DrafterCase, rules: EngineRules) -> list[Finding]:
    if case.method == "mtp":
        return []
    e3 = is_eagle3(case.drafter)
    w = read_shapes(case.drafter)
    archs = f"config architectures {', '.join(case.drafter.architectures) or 'none'}" + (f"; {w.evidence} ({w.kind})" if w is not None and w.kind else "")
    if case.method == "eagle" and e3 is True:
        return [Finding("method-architecture-mismatch", "error", "an EAGLE-3 drafter under method 'eagle'", archs, 'set method = "eagle3"')]
    if case.method == "eagle3" and e3 is False:
        return [Finding("method-architecture-mismatch", "error", "an EAGLE(-1) drafter under method 'eagle3': its fc fuses one hidden state, not several",
                        archs, 'set method = "eagle"')]
    if case.method == "draft_model" and e3 is not None:
        which = "eagle3" if e3 else "eagle"
        return [Finding("method-architecture-mismatch", "error", "an EAGLE head under method 'draft_model': it cannot run on its own", archs, f'set method = "{which}"')]
    return []


def _architecture(case: DrafterCase, rules: EngineRules) -> list[Finding]:
    out: list[Finding] = []
    spec = case.drafter.speculators_type
    if spec is not None and case.method in ("eagle", "eagle3"):
        out.extend(_speculators_architecture(case, rules))
    elif case.method in ("eagle", "eagle3") and rules.drafter_architectures is not None:
        for arch in case.drafter.architectures[:1]:
            cls = rules.drafter_class(arch, case.method)
            if cls not in rules.drafter_architectures:
                near = sorted(a for a in rules.drafter_architectures if "eagle3" in a.lower()) if case.method == "eagle3" else []
                out.append(Finding(
                    "architecture-unsupported", "error",
                    f"{rules.engine} {rules.version or ''} has no drafter class {cls} (from architectures [{arch}])".replace("  ", " "),
                    f"{rules.source}; accepted EAGLE-3 classes: {', '.join(near[:8]) or 'none'}",
                    "use an engine version that registers it, or set the drafter's architectures to one it accepts (e.g. LlamaForCausalLMEagle3)",
                ))
    mt = case.target.text_model_type or ""
    if case.method == "eagle3" and rules.eagle3_target_types is not None and not any(t in mt for t in rules.eagle3_target_types):
        provisional = any(f in case.patched_files for f in rules.files[:1])
        out.append(Finding(
            "architecture-unsupported", "warning" if provisional else "error",
            f"{rules.engine} {rules.version or ''} takes EAGLE-3 only for model types containing {list(rules.eagle3_target_types)}; the target's is {mt!r}".replace("  ", " ")
            + (" (unpatched source; the patch set changes that file)" if provisional else ""),
            f"{rules.files[0] if rules.files else 'speculative config'}: eagle3_target_supported",
            "patch the whitelist (as the Kimi-K2.5 campaign did) or use an engine version without it",
        ))
    if case.method == "eagle3" and rules.eagle3_target_ok is False:
        target = ", ".join(case.target.architectures) or "?"
        provisional = any(f in case.patched_files for f in rules.files if f in rules.eagle3_target_evidence)
        out.append(Finding(
            "architecture-unsupported", "warning" if provisional else "error",
            f"{rules.engine} {rules.version or ''} does not take EAGLE-3 aux hidden states from {target} (model type {case.target.text_model_type})".replace("  ", " ")
            + (" in the unpatched source; the patch set changes that file" if provisional else ""),
            rules.eagle3_target_evidence,
            "patch the target model class to support EAGLE-3 (as the Kimi-K2.5 campaign did), or use method eagle / another engine",
        ))
    return out


def _speculators_architecture(case: DrafterCase, rules: EngineRules) -> list[Finding]:
    """A speculators-format head: the engine's own reader picks its class from the layer config's model_type."""
    mt = str(case.drafter.text.get("model_type", "llama"))
    archs = rules.speculators_archs
    if archs is None:
        return []
    cls = archs.get(mt)
    if not archs:
        arch = ", ".join(case.drafter.architectures) or "none"
        return [Finding(
            "architecture-unsupported", "error",
            f"{rules.engine} {rules.version or ''} does not read this speculators-format head ({case.drafter.speculators_type}): it would look for a model class {arch}".replace("  ", " "),
            rules.speculators_evidence, "convert the head to the flat EAGLE-3 layout (SpecForge / SafeAILab config.json) or serve it with vLLM",
        )]
    if cls is None:
        return [Finding(
            "architecture-unsupported", "error",
            f"{rules.engine} {rules.version or ''} reads speculators-format EAGLE-3 heads only for layer model types {sorted(archs)}; this one's is {mt!r}".replace("  ", " "),
            rules.speculators_evidence, "use a head whose transformer_layer_config.model_type the engine maps, or an engine version that maps it",
        )]
    if rules.drafter_architectures is not None and cls not in rules.drafter_architectures:
        return [Finding("architecture-unsupported", "error", f"{rules.engine} {rules.version or ''} maps this head to {cls}, which it does not register".replace("  ", " "),
                        f"{rules.speculators_evidence}; {rules.source}", "use an engine version that registers it")]
    return []


def _config_weights(case: DrafterCase, rules: EngineRules) -> list[Finding]:
    """The config against the weights: the engine builds from the config and loads the weights into it."""
    if case.method not in ("eagle", "eagle3"):
        return []
    d = case.drafter
    w = read_shapes(d)
    if w is None:
        return []
    out: list[Finding] = []
    ch = d.hidden_size
    if ch is not None and w.hidden is not None and ch != w.hidden:
        out.append(Finding(
            "config-weights-mismatch", "error",
            f"the drafter's config says hidden_size {ch}, its weights say {w.hidden}: the engine builds {ch}-wide layers and cannot load them",
            f"{d.path}/config.json hidden_size={ch}; {w.evidence}",
            f"use the config the weights were saved with (hidden_size {w.hidden}); editing the config does not change what the head was trained on",
        ))
    ths = d.target_hidden_size
    if w.kind == "eagle3" and ths and w.fc_in is not None and w.fc_in % ths:
        out.append(Finding(
            "config-weights-mismatch", "error",
            f"the drafter's config says target_hidden_size {ths}, its fc takes {w.fc_in} inputs, not a multiple of it: the engine builds fc for {ths}-wide states",
            f"{d.path}/config.json target_hidden_size={ths}; {w.evidence}",
            "use the config the weights were saved with; the fc width is fixed by training",
        ))
    cv = d.draft_vocab_size if d.draft_vocab_size is not None else d.vocab_size
    if w.kind == "eagle3" and cv is not None and w.lm_head_rows is not None and cv != w.lm_head_rows:
        key = "draft_vocab_size" if d.draft_vocab_size is not None else "vocab_size"
        out.append(Finding(
            "config-weights-mismatch", "error",
            f"the drafter's config says {key} {cv}, its lm_head has {w.lm_head_rows} rows: the engine builds a {cv}-row head and cannot load it",
            f"{d.path}/config.json {key}={cv}; {w.evidence}",
            f"set draft_vocab_size to {w.lm_head_rows} (the weights' own), not a d2t for {cv} ids",
        ))
    return out


def _vocab(case: DrafterCase, rules: EngineRules) -> list[Finding]:
    dv, tv = case.drafter.vocab_size, case.target.vocab_size
    if dv is None or tv is None or dv == tv:
        return []
    return [Finding(
        "target-vocab-mismatch", "error",
        f"the drafter's vocab_size is {dv}, the target's is {tv}",
        f"{case.drafter.path}/config.json vocab_size={dv}; {case.target.path}/config.json vocab_size={tv}",
        "use a drafter trained for this target's tokenizer (set vocab_size to the target's only if the tokenizer really is the same)",
    )]


def _vocab_map(case: DrafterCase, rules: EngineRules) -> list[Finding]:
    if case.method not in ("eagle", "eagle3"):
        return []
    d, tv = case.drafter, case.target.vocab_size
    draft_vocab = d.draft_vocab_size
    head = d.tensor("lm_head.weight")
    if head is not None and head[1].shape:
        draft_vocab = head[1].shape[0]  # the weights' own size wins over the config (config-weights-mismatch says so)
    if draft_vocab is None or tv is None or draft_vocab >= tv:
        return []
    if d.d2t is None:
        if not d.headers:
            return [Finding("vocab-map-missing", "warning", f"draft vocab {draft_vocab} < target vocab {tv} and no safetensors file to look for d2t in",
                            f"{d.path}: no *.safetensors", "check that the drafter's weights hold a d2t tensor")]
        return [Finding(
            "vocab-map-missing", "error",
            f"draft vocab {draft_vocab} < target vocab {tv} and the weights hold no d2t map: draft ids land on the first {draft_vocab} target ids",
            f"{', '.join(h.path.rsplit('/', 1)[-1] for h in d.headers)}: tensors {', '.join(sorted(d.tensor_names())[:6])}…",
            "save d2t (int64 offsets, target = i + d2t[i]) with the drafter, as SpecForge does",
        )]
    m = d.d2t
    out: list[Finding] = []
    if m.size != draft_vocab:
        out.append(Finding("vocab-map-out-of-range", "error", f"d2t has {m.size} entries for a draft vocab of {draft_vocab}",
                           f"d2t {m.dtype}[{m.size}]", "regenerate d2t for this drafter's vocab"))
    if m.out_of_range:
        i, v = m.first_bad or (0, 0)
        out.append(Finding(
            "vocab-map-out-of-range", "error",
            f"{m.out_of_range} of {m.size} draft ids map outside the target vocab (0..{tv - 1})",
            f"first: i={i}, d2t[i]={v}, i + d2t[i] = {i + v}; mapped range {m.lowest}..{m.highest}",
            "regenerate d2t as offsets (target id - draft id) against this target's tokenizer",
        ))
    elif m.holds_ids:
        out.append(Finding(
            "vocab-map-out-of-range", "error", "d2t holds target ids (d2t[i] == i), not offsets: draft id i maps to 2i",
            f"d2t {m.dtype}[{m.size}] is an arange; mapped range {m.lowest}..{m.highest}",
            "store offsets: d2t[i] = target_id(i) - i",
        ))
    if d.t2d_true is not None and d.t2d_true != draft_vocab:
        out.append(Finding("vocab-map-out-of-range", "warning", f"t2d marks {d.t2d_true} target ids, the draft vocab has {draft_vocab}",
                           "t2d bool tensor", "regenerate t2d together with d2t"))
    return out


def _expected_fused(case: DrafterCase, rules: EngineRules) -> int:
    """How many target hidden states the engine will fuse: one per aux id (explicit or default), else 3."""
    ids = case.drafter.aux_layer_ids
    if ids is not None:
        return len(ids)
    n = case.target.num_layers
    defaults = rules.defaults(n) if n is not None else None
    return len(defaults) if defaults else 3


def _weights_target_hidden(case: DrafterCase, rules: EngineRules, w: WeightShapes | None) -> tuple[int | None, str]:
    """The target hidden size the weights were trained on: fc input over the fused count (EAGLE-3), or
    the head's own width (EAGLE-1, whose fc takes embedding + hidden)."""
    if w is None or w.fc_in is None:
        return None, ""
    if w.kind == "eagle1" and w.hidden:
        return w.hidden, f"{w.evidence}: fc takes 2×{w.hidden}"
    if w.kind == "eagle3":
        k = _expected_fused(case, rules)
        if w.fc_in % k == 0:
            return w.fc_in // k, f"{w.evidence}: fc takes {k}×{w.fc_in // k}"
    return None, ""


def _foreign_head(case: DrafterCase, rules: EngineRules) -> tuple[int, str] | None:
    """(target hidden, evidence) when the weights say the head was trained for another target's hidden size:
    every shape agrees on a width that is not this target's, so fc's width is not a count of this target's states."""
    th = case.target.hidden_size
    if th is None or case.method not in ("eagle", "eagle3"):
        return None
    d = case.drafter
    w = read_shapes(d)
    wth, wev = _weights_target_hidden(case, rules, w)
    if wth is not None and wth != th and not _fc_counts_target_states(case, rules, w, th):
        return wth, wev
    return None


def _fc_counts_target_states(case: DrafterCase, rules: EngineRules, w: WeightShapes | None, th: int) -> bool:
    """Whether fc's input is a whole number of this target's states and the head's other shapes say it was
    made for this width: its target_hidden_size, or (none set) its own width, the weights' before the config's.
    fc exactly the expected count of the head's own (other) width is another target's, whatever the config says."""
    if w is None or w.fc_in is None or w.fc_in % th:
        return False
    if w.hidden is not None and w.hidden != th and w.fc_in == _expected_fused(case, rules) * w.hidden:
        return False
    ths = case.drafter.target_hidden_size
    if ths is not None:
        return ths == th
    own = w.hidden if w.hidden is not None else case.drafter.hidden_size
    return own == th


def _hidden(case: DrafterCase, rules: EngineRules) -> list[Finding]:
    if case.method not in HIDDEN_METHODS or case.method == "mtp":
        return []
    d, th = case.drafter, case.target.hidden_size
    if th is None:
        return []
    w = read_shapes(d)
    wth, _ = _weights_target_hidden(case, rules, w)
    dh = d.target_hidden_size or d.hidden_size
    key = "target_hidden_size" if d.target_hidden_size else "hidden_size"
    foreign = _foreign_head(case, rules)
    if foreign is not None:
        ids = d.aux_layer_ids
        return [Finding(
            "hidden-size-mismatch", "error",
            f"the drafter's weights expect target hidden states of {foreign[0]}, the target's hidden_size is {th}: a head trained for another target",
            f"{foreign[1]}; {d.path}/config.json {key}={dh}; {case.target.path}/config.json hidden_size={th}"
            + (f"; its aux ids {list(ids)} are that target's layers too" if ids else ""),
            "use a drafter trained on this target; no config change (aux ids, hidden sizes) makes these weights fit",
        )]
    if wth is None and dh is not None and dh != th and not (w is not None and w.hidden == th):
        return [Finding(
            "hidden-size-mismatch", "error",
            f"the drafter expects target hidden states of {dh}, the target's hidden_size is {th}",
            f"{d.path}/config.json {key}={dh}; {case.target.path}/config.json hidden_size={th}",
            "use a drafter trained on this target (or set target_hidden_size if the drafter really was)",
        )]
    if w is not None and w.fc_in is not None and wth is None and w.fc_in % th:
        return [Finding(
            "hidden-size-mismatch", "error",
            f"fc.weight takes {w.fc_in} inputs, not a multiple of the target's hidden_size {th}",
            w.evidence, "use a drafter trained on this target",
        )]
    return []


def _aux(case: DrafterCase, rules: EngineRules) -> list[Finding]:
    if case.method != "eagle3" or _foreign_head(case, rules) is not None or is_eagle3(case.drafter) is False:
        return []  # a head for another target (ids of that target) or an EAGLE-1 head (no aux states): the cause is reported elsewhere
    n = case.target.num_layers
    if n is None:
        return []
    ids = case.drafter.aux_layer_ids
    explicit = ids is not None
    defaults = rules.defaults(n)
    used = ids if ids is not None else defaults
    if used is None:
        return []
    taps = rules.taps(used, explicit)
    top = rules.max_tap(n)
    where = "eagle_config.eagle_aux_hidden_state_layer_ids" if explicit else f"none set: {rules.engine}'s default ({', '.join(rules.default_aux or ())})"
    ev = f"target num_hidden_layers={n}; ids {list(used)} ({where}); {rules.convention_evidence}"
    out: list[Finding] = []
    bad = [t for t in taps if t < 0 or t > top]
    valid = [t for t in taps if 0 <= t <= top]
    th = case.target.hidden_size
    w = read_shapes(case.drafter)
    fused = w.fused(th) if w is not None and w.kind != "eagle1" and th else None
    # fc's width counts aux states only when the head is built for this target's hidden size: every
    # other shape (its own width, its config) must agree, or the width is another target's, not more ids.
    wth, _ = _weights_target_hidden(case, rules, w)
    trusted = fused is not None and th is not None and (wth == th or _fc_counts_target_states(case, rules, w, th))
    wanted = fused if trusted and fused is not None else len(used)
    if explicit and not bad and trusted and len(used) != wanted and w is not None:
        out.append(Finding(
            "aux-layers-out-of-range", "error",
            f"the drafter lists {len(used)} aux ids {list(used)} but its fc fuses {wanted} target states: {rules.engine} builds fc for {len(used)}×{th} and cannot load its weights",
            f"{w.evidence}; {ev}",
            f"list exactly the {wanted} layer ids the drafter was trained with (from its training config), not ids picked to fit",
        ))
    elif bad or len(valid) < wanted:
        what = f"taps {bad} are not layers of a {n}-layer target (valid 0..{top})" if bad else f"only {len(valid)} distinct taps for {wanted} fused states"
        out.append(Finding(
            "aux-layers-out-of-range", "error",
            f"aux hidden-state ids {list(used)} → {what}: the fused states come out {len(valid)}×{th or '?'} wide, the drafter's fc wants {wanted}×",
            ev,
            f"set eagle_config.eagle_aux_hidden_state_layer_ids to {wanted} ids within the target, e.g. {_suggest(n, wanted, rules)}",
        ))
    layers = ", ".join(_layer_name(t) for t in taps)
    if explicit and rules.explicit_offset != rules.default_offset:
        out.append(Finding(
            "aux-layers-convention", "warning",
            f"{rules.engine} adds {rules.explicit_offset - rules.default_offset:+d} to explicit ids but not to its defaults: it taps {layers}",
            ev, "check which convention the drafter was trained with (SpecForge/vLLM: id j is the output of layer j-1)",
        ))
    elif explicit and defaults is not None and tuple(used) != defaults:
        # the engine taps the drafter's own ids, on the convention they are written in: the layers it
        # was trained on, not other ones (a note, not a doubt to rule out)
        out.append(Finding(
            "aux-layers-convention", "info",
            f"{rules.engine} taps the drafter's own ids {list(used)} ({layers}), not its default {list(defaults)} for {n} layers",
            ev, "nothing to change while these are the layers the drafter was trained on",
        ))
    elif not explicit:
        out.append(Finding(
            "aux-layers-convention", "info", f"no aux ids in the drafter config: {rules.engine} uses its default and taps {layers}",
            ev, "write the ids the drafter was trained with into eagle_config.eagle_aux_hidden_state_layer_ids",
        ))
    return out


def _layer_name(tap: int) -> str:
    if tap < 0:
        return f"nothing (tap {tap})"
    return "the embeddings" if tap == 0 else f"the output of layer {tap - 1}"


def _suggest(n: int, k: int, rules: EngineRules) -> list[int]:
    top = rules.max_tap(n)
    lo = 1 if top >= k else 0
    if top - lo + 1 < k:
        return list(range(0, top + 1))
    step = (top - lo) / max(k - 1, 1)
    taps = sorted({lo + round(step * i) for i in range(k)})
    return [t - rules.explicit_offset for t in taps]


def _tokens(case: DrafterCase, rules: EngineRules) -> list[Finding]:
    d, t = case.drafter.special_ids(), case.target.special_ids()
    diffs = [f"{k}: drafter {d[k]} vs target {t[k]}" for k in d if d[k] is not None and t[k] is not None and _as_set(d[k]) != _as_set(t[k])]
    # eos may legitimately be a superset in the target's generation_config (several stop ids).
    diffs = [x for x in diffs if not (x.startswith("eos") and _as_set(d["eos_token_id"]) <= _as_set(t["eos_token_id"]))]
    for key in ("bos_token", "eos_token"):
        a, b = _token_text(case.drafter.tokenizer.get(key)), _token_text(case.target.tokenizer.get(key))
        if a and b and a != b:
            diffs.append(f"{key}: drafter {a!r} vs target {b!r}")
    if not diffs:
        return []
    return [Finding(
        "special-tokens-mismatch", "warning" if case.method != "draft_model" else "error",
        f"special tokens differ between drafter and target ({'; '.join(diffs)}): a sign of another tokenizer",
        f"{case.drafter.path} vs {case.target.path} (generation_config.json, config.json, tokenizer_config.json)",
        "use a drafter trained with this target's tokenizer; if it was, copy the target's ids into the drafter config",
    )]


def _as_set(v: int | tuple[int, ...] | None) -> set[int]:
    if v is None:
        return set()
    return set(v) if isinstance(v, tuple) else {v}


def _token_text(v: object) -> str | None:
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) and v else None


def _context(case: DrafterCase, rules: EngineRules) -> list[Finding]:
    dp = case.drafter.max_positions
    need = case.max_model_len or case.target.max_positions
    if dp is None or need is None or dp >= need:
        return []
    raised = case.method in rules.raises_draft_positions
    source = "the experiment's max-model-len" if case.max_model_len else "the target's max_position_embeddings"
    return [Finding(
        "context-too-short", "info" if raised else "error",
        f"the drafter's max_position_embeddings is {dp}, below {source} {need}"
        + (f": {rules.engine} {rules.version or ''} raises it to the target's for {case.method}".replace("  ", " ") if raised else ""),
        f"{case.drafter.path}/config.json max_position_embeddings={dp}",
        f"set max-model-len <= {dp}, or use a drafter trained for longer context" if not raised else "none needed; acceptance past the drafter's trained length may still fall",
    )]


def _norm_flags(case: DrafterCase, rules: EngineRules) -> list[Finding]:
    if rules.read_flags is None or case.method not in ("eagle", "eagle3"):
        return []
    flags = {k: v for k, v in case.drafter.flags().items() if "norm" in k.lower()}
    ignored = sorted(k for k, v in flags.items() if k not in rules.read_flags and v)
    if not ignored:
        return []
    return [Finding(
        "norm-flags-ignored", "warning",
        f"{rules.engine} {rules.version or ''} does not read {', '.join(ignored)}: the drafter runs without it".replace("  ", " "),
        f"{case.drafter.path}/config.json {', '.join(f'{k}={flags[k]}' for k in ignored)}; not in {rules.flags_reader}",
        "use an engine version that implements the flag (or a drafter trained without it)",
    )]
