"""SGLang's drafter rules (beside engines/adapters/sglang.py), from its installed source when the host has it.

SGLang taps a hidden state before layer i for i in 0..N-1 (``if i in self.layers_to_capture``),
so tap c is the output of layer c-1 and there is no tap after the last layer. Each target model's
``set_eagle3_layers_to_capture`` uses ``[2, N // 2, N - 3]`` as they are when the drafter gives no
ids, and adds 1 to ids it does give (``[val + 1 for val in layer_ids]``): the same config taps one
layer later on SGLang than on vLLM (sgl-project/sglang PR #25454). A target whose model file has no
``set_eagle3_layers_to_capture`` cannot serve EAGLE-3. Read from ``sglang/srt/models/<type>.py``;
where the file is not there, these facts of SGLang 0.5 are the fallback and the evidence says so.
"""

from __future__ import annotations

import re

from servelab.engines.adapters.sglang_mtp import FILE as MODEL_CONFIG
from servelab.engines.adapters.sglang_mtp import nextn_map
from servelab.engines.drafter.rules import EngineRules, MtpRule, RulesQuery, SourceReader

MODELS = "sglang/srt/models"
CONFIG_LOADER = "sglang/srt/utils/hf_transformers/config.py"
#: The files that hold SGLang's EAGLE drafter classes (``EntryClass``).
DRAFTER_FILES = ("llama_eagle3.py", "llama_eagle.py", "qwen2_eagle.py", "deepseek_eagle3.py")
_ENTRY = re.compile(r"^EntryClass\s*=\s*\[?([\w\s,]+)\]?", re.M)
_QUOTED = re.compile(r'"([a-z][a-z0-9_]+)"')
#: SGLang 0.5's drafter classes, when the host's install cannot be read.
KNOWN_DRAFTERS = frozenset({"LlamaForCausalLMEagle3", "LlamaForCausalLMEagle", "Qwen2ForCausalLMEagle"})


def _target_files(model_type: str | None, arch: str | None) -> list[str]:
    names: list[str] = []
    if model_type:
        names.append(model_type)
        if model_type.startswith("deepseek"):
            names.append("deepseek_v2")
    if arch and arch.startswith("KimiK25"):
        names.append("kimi_k25")
    return [f"{MODELS}/{n}.py" for n in dict.fromkeys(names)]


async def read_rules(read: SourceReader, query: RulesQuery) -> EngineRules:
    version, target_arch, drafter_arch, target_model_type = query.version, query.target_arch, query.drafter_arch, query.target_model_type
    files: list[str] = []
    drafters: set[str] = set()
    flags: set[str] = set()
    flags_reader = ""
    for name in DRAFTER_FILES:
        rel = f"{MODELS}/{name}"
        text = await read(rel)
        if text is None:
            continue
        files.append(rel)
        entries = [e.strip() for m in _ENTRY.findall(text) for e in m.split(",") if e.strip()]
        drafters.update(entries)
        if drafter_arch in entries:
            flags = set(_QUOTED.findall(text))
            flags_reader = rel
    target_ok: bool | None = None
    target_ev = ""
    offset = 1
    conv = "SGLang 0.5 (source not readable on the host): explicit ids get +1; tap c is the output of layer c-1, taps 0..N-1"
    for rel in _target_files(target_model_type, target_arch):
        text = await read(rel)
        if text is None:
            continue
        files.append(rel)
        has = "set_eagle3_layers_to_capture" in text
        target_ok = has
        target_ev = f"{rel}: " + ("has" if has else "has no") + " set_eagle3_layers_to_capture"
        if has:
            offset = 1 if "[val + 1 for val in layer_ids]" in text else 0
            conv = f"{rel}: explicit ids get {offset:+d}, defaults as they are; tap c is the output of layer c-1, taps 0..N-1"
        break
    # Speculators-format heads: SGLang's config loader either knows the format or it does not.
    spec_archs: dict[str, str] | None = None
    spec_ev = ""
    if "speculators_model_type" in query.drafter_config:
        loader = await read(CONFIG_LOADER)
        if loader is not None:
            files.append(CONFIG_LOADER)
            if "speculators" not in loader:
                spec_archs = {}
                spec_ev = f"{CONFIG_LOADER}: get_config has no speculators-format reader (the head's architectures are read as they are)"
    mtp: MtpRule | None = None
    if query.method == "mtp":
        text = await read(MODEL_CONFIG)
        if text is not None:
            files.append(MODEL_CONFIG)
            mtp = _mtp_rule(nextn_map(text), query)
    read_any = bool(files)
    return EngineRules(
        engine="SGLang", version=version,
        source=f"read from the installed SGLang {version or '?'}" if read_any else "servelab's table for SGLang 0.5 (its source is not on the host)",
        drafter_architectures=frozenset(drafters) if drafters else (KNOWN_DRAFTERS if not read_any else None),
        arch_prefix={}, eagle3_target_ok=target_ok, eagle3_target_evidence=target_ev,
        default_aux=("2", "num_layers // 2", "num_layers - 3"), explicit_offset=offset, default_offset=0,
        taps_after_last_layer=False, dedups_taps=False, convention_evidence=conv,
        read_flags=frozenset(flags) if flags_reader else None, flags_reader=flags_reader, files=tuple(files), mtp=mtp,
        speculators_archs=spec_archs, speculators_evidence=spec_ev,
    )


def _mtp_rule(renames: dict[str, tuple[str, int, int | None]], query: RulesQuery) -> MtpRule:
    """SGLang's NextN draft for the target: the renamed architecture; the layer count from the target's config."""
    arch = query.target_arch or ""
    text = query.target_config.get("text_config")
    cfg = text if isinstance(text, dict) else query.target_config
    n = cfg.get("num_nextn_predict_layers")
    n_predict = n if isinstance(n, int) and not isinstance(n, bool) else None
    if arch in renames:
        new, line, fixed = renames[arch]
        return MtpRule(supported=True, model_type=query.target_model_type, architecture=new, n_predict=fixed if fixed is not None else n_predict,
                       count_key="num_nextn_predict_layers", evidence=f"{MODEL_CONFIG}:{line}: _config_draft_model serves {arch} as {new}"
                       + (f" with num_nextn_predict_layers = {fixed}" if fixed is not None else ""))
    return MtpRule(supported=False, model_type=query.target_model_type, architecture=arch or None, n_predict=None, count_key=None,
                   evidence=f"{MODEL_CONFIG}: _config_draft_model renames no {arch or '?'} to a NextN/MTP draft "
                            f"(it does for {', '.join(sorted(renames)[:6])}, ...)")
