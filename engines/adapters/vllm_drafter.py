"""vLLM's drafter rules, read from the installed vLLM's own source on the host (beside engines/adapters/vllm.py).

Each rule is found by a pattern in the file that holds it, so a vLLM release that moves or changes
a rule shows up as "not found" (the rule falls back to what vLLM 0.32 does, and the evidence says
so) rather than as a silently wrong answer:

- ``config/speculative.py``: the method-from-path rules (``"eagle-" in ...model.lower()``), the
  methods exempt from them, the EAGLE-3 target whitelist of older releases, and whether EAGLE
  drafters get their max positions raised to the target's;
- ``model_executor/models/registry.py``: the speculative drafter classes, and the target's module;
- ``transformers_utils/configs/eagle.py``: the ``Eagle3`` prefix vLLM puts before a drafter class;
- ``model_executor/models/interfaces.py``: the default aux ids ``(2, N // 2, N - 3)`` and the
  de-duplication of taps; the target's module: the tap after each layer (``idx + 1``: id j is the
  output of layer j-1) and whether its class declares ``SupportsEagle3``;
- the drafter's module (``llama_eagle3.py``): which config flags it reads.
"""

from __future__ import annotations

import re

from servelab.engines.adapters.vllm_mtp import resolve as resolve_mtp
from servelab.engines.drafter.rules import EngineRules, MtpRule, PathRule, RulesQuery, SourceReader

SPEC = "vllm/config/speculative.py"
REGISTRY = "vllm/model_executor/models/registry.py"
EAGLE_CONFIG = "vllm/transformers_utils/configs/eagle.py"
INTERFACES = "vllm/model_executor/models/interfaces.py"
SPECULATORS_ALGOS = "vllm/transformers_utils/configs/speculators/algos.py"
_ARCH_MAP = re.compile(r"eagle3_arch_map\s*=\s*\{([^}]*)\}", re.S)
_PAIR = re.compile(r'"(\w+)"\s*:\s*"(\w+)"')
MODELS = "vllm/model_executor/models"

_PATH_RULE = re.compile(r'"([^"]+)"\s+in\s+self\.draft_model_config\.model\.lower\(\)\s*\)?\s*:\s*\n\s*self\.method\s*=\s*"(\w+)"')
_EXEMPT = re.compile(r'#\s*Automatically detect the method\s*\n\s*if self\.method in \(([^)]*)\):\s*\n\s*pass')
_WHITELIST = re.compile(r"eagle3_target_supported\s*=\s*\[([^\]]*)\]")
_DEFAULT_AUX = re.compile(r"def get_eagle3_default_aux_hidden_state_layers.*?return \(([^)]*)\)", re.S)
_SPEC_MODELS = re.compile(r"_SPECULATIVE_DECODING_MODELS\s*=\s*\{(.*?)\n\}", re.S)
_ENTRY = re.compile(r'^\s*"(\w+)":\s*\(\s*"([\w.]+)",\s*"(\w+)"\s*\)', re.M)
_QUOTED = re.compile(r'"([a-z][a-z0-9_]+)"')


def _names(text: str) -> list[str]:
    return re.findall(r'"(\w+)"', text)


async def read_rules(read: SourceReader, query: RulesQuery) -> EngineRules:
    version, target_arch, drafter_arch = query.version, query.target_arch, query.drafter_arch
    """vLLM's rules from its installed source (``read``); vLLM 0.32's where a file or pattern is missing."""
    spec, registry, eagle_cfg, interfaces = [await read(f) for f in (SPEC, REGISTRY, EAGLE_CONFIG, INTERFACES)]
    files: list[str] = []
    notes: list[str] = []

    # Method from the drafter's path.
    path_rules: tuple[PathRule, ...] = ()
    exempt: frozenset[str] = frozenset({"eagle", "eagle3", "dflash", "dspark"})
    path_ev = "servelab's table for vLLM 0.32 (config/speculative.py not readable)"
    raises: frozenset[str] = frozenset({"eagle", "eagle3"})
    whitelist: tuple[str, ...] | None = None
    if spec is not None:
        files.append(SPEC)
        found = _PATH_RULE.findall(spec)
        path_rules = tuple(PathRule(n.lower(), m) for n, m in found)
        m = _EXEMPT.search(spec)
        if m:
            exempt = frozenset(_names(m.group(1)))
        line = next((i + 1 for i, ln in enumerate(spec.splitlines()) if '"eagle-" in self.draft_model_config.model.lower()' in ln), None)
        path_ev = f"{SPEC}" + (f":{line}" if line else "") + f": method from path {', '.join(f'{r.needle!r}->{r.method}' for r in path_rules) or 'none'}, except under {', '.join(sorted(exempt))}"
        raises = frozenset({"eagle", "eagle3"}) if "_maybe_override_draft_max_position_embeddings" in spec else frozenset()
        w = _WHITELIST.search(spec)
        if w:
            whitelist = tuple(_names(w.group(1)))
    else:
        path_rules = (PathRule("eagle-", "eagle"), PathRule("eagle3", "eagle3"))
        notes.append(f"{SPEC} not found")

    # Drafter classes and the target's module.
    drafters: frozenset[str] | None = None
    entries: dict[str, tuple[str, str]] = {}
    if registry is not None:
        files.append(REGISTRY)
        entries = {a: (mod, cls) for a, mod, cls in _ENTRY.findall(registry)}
        sm = _SPEC_MODELS.search(registry)
        if sm:
            drafters = frozenset(a for a, _, _ in _ENTRY.findall(sm.group(1)))
    else:
        notes.append(f"{REGISTRY} not found")

    prefix = {"eagle3": "Eagle3", "eagle": "Eagle"}
    if eagle_cfg is not None:
        files.append(EAGLE_CONFIG)
        if 'f"Eagle3{arch}"' not in eagle_cfg:
            prefix.pop("eagle3")
        if 'f"Eagle{arch}"' not in eagle_cfg:
            prefix.pop("eagle")

    default_aux: tuple[str, ...] = ("2", "num_layers // 2", "num_layers - 3")
    dedup = True
    aux_src = "vLLM 0.32's default (interfaces.py not readable)"
    if interfaces is not None:
        files.append(INTERFACES)
        m = _DEFAULT_AUX.search(interfaces)
        if m:
            default_aux = tuple(p.strip() for p in m.group(1).split(",") if p.strip())
            aux_src = f"{INTERFACES}: default ({', '.join(default_aux)})"
        dedup = "sorted(set(layers))" in interfaces

    # The target's module: the tap convention and SupportsEagle3.
    target_ok: bool | None = None
    target_ev = ""
    after_last = True
    conv = "id j taps the output of layer j-1 (0: embeddings)"
    target_entry = entries.get(target_arch or "")
    if target_entry is not None:
        mod, cls = target_entry
        rel = _module_file(mod)
        text = await read(rel)
        if text is not None:
            files.append(rel)
            if "SupportsEagle3" not in text and "set_aux_hidden_state_layers" not in text and whitelist is not None:
                declares = True  # older releases: no interface, the whitelist decides
            else:
                declares = _declares(text, cls, "SupportsEagle3")
            target_ok = declares
            target_ev = f"{rel}: class {cls} " + ("declares" if declares else "does not declare") + " SupportsEagle3"
            if "idx + 1, hidden_states, residual" in text or re.search(r"_maybe_add_hidden_state\(\s*aux_hidden_states,\s*idx \+ 1", text):
                conv = f"{rel}: taps after each layer (idx + 1), so id j is the output of layer j-1 (0: embeddings)"

    # The drafter's module: the config flags it reads.
    read_flags: frozenset[str] | None = None
    flags_reader = ""
    if drafter_arch and query.method in prefix:
        p = prefix[query.method]
        cls_name = drafter_arch if drafter_arch.startswith(p) or drafter_arch.endswith(p) else p + drafter_arch
        read_flags, flags_reader = await _flags_of(entries.get(cls_name), read, files)

    mtp = _mtp_rule(spec, query, entries) if query.method == "mtp" and spec is not None else None

    # Speculators-format drafters: vLLM's reader picks the class from the layer config's model_type.
    spec_archs: dict[str, str] | None = None
    spec_ev = ""
    if "speculators_model_type" in query.drafter_config:
        algos = await read(SPECULATORS_ALGOS)
        m = _ARCH_MAP.search(algos or "")
        if algos is not None and m:
            files.append(SPECULATORS_ALGOS)
            registered = re.findall(r'@register_speculator\("(\w+)"\)', algos)
            kind = str(query.drafter_config.get("speculators_model_type"))
            spec_archs = dict(_PAIR.findall(m.group(1))) if kind in registered or not registered else {}
            spec_ev = (f"{SPECULATORS_ALGOS}: update_eagle3 maps model_type {spec_archs}" if spec_archs else
                       f"{SPECULATORS_ALGOS}: speculators types {registered}; {kind!r} is not one (vLLM raises 'Expected one of')")
        if read_flags is None and spec_archs:
            layer = query.drafter_config.get("transformer_layer_config") or {}
            layer_type = str(layer.get("model_type", "llama")) if isinstance(layer, dict) else "llama"
            read_flags, flags_reader = await _flags_of(entries.get(spec_archs.get(layer_type, "")), read, files)

    source = f"read from the installed vLLM {version or '?'}" + (f" ({'; '.join(notes)})" if notes else "")
    return EngineRules(
        engine="vLLM", version=version, source=source, drafter_architectures=drafters, arch_prefix=prefix,
        eagle3_target_ok=target_ok, eagle3_target_evidence=target_ev,
        path_rule_exempt=exempt, path_rules=path_rules, path_rule_evidence=path_ev,
        default_aux=default_aux, explicit_offset=0, default_offset=0, taps_after_last_layer=after_last,
        dedups_taps=dedup, convention_evidence=f"{conv}; {aux_src}" + ("; duplicate taps collapse" if dedup else ""),
        raises_draft_positions=raises, read_flags=read_flags, flags_reader=flags_reader, files=tuple(files),
        eagle3_target_types=whitelist, mtp=mtp, speculators_archs=spec_archs, speculators_evidence=spec_ev,
    )


def _mtp_rule(spec: str, query: RulesQuery, entries: dict[str, tuple[str, str]]) -> MtpRule | None:
    """vLLM's MTP draft for the target: its own ``hf_config_override`` walked over the target's config."""
    try:
        r = resolve_mtp(spec, query.target_config)
    except (SyntaxError, ValueError, RecursionError):
        return None
    if r is None:
        return None
    registered = r.architecture in entries if entries and r.architecture else None
    where = f"{SPEC}" + (f":{r.line}" if r.line else "")
    if r.raises:
        ev = f"{where}: hf_config_override raises for this target: {r.raises}"
    elif r.model_type in r.mtp_types:
        ev = (f"{where}: hf_config_override maps model_type {query.target_model_type!r} to {r.model_type!r} ({r.architecture}), "
              f"n_predict from {r.count_key or '?'}")
    else:
        ev = (f"{SPEC}: hf_config_override leaves model_type {r.model_type!r}, not one of MTPModelTypes "
              f"({', '.join(sorted(r.mtp_types)[:6])}, ...): vLLM raises 'Unsupported speculative method: mtp'")
    return MtpRule(
        supported=r.supported and registered is not False, model_type=r.model_type, architecture=r.architecture,
        n_predict=r.n_predict, count_key=r.count_key, evidence=ev + ("" if registered is not False else f"; {r.architecture} is not in {REGISTRY}"),
        tokens_divisible="% n_predict != 0" in spec, reuse_warning="multiple times of forward on same MTP layer" in spec,
    )


async def _flags_of(entry: tuple[str, str] | None, read: SourceReader, files: list[str]) -> tuple[frozenset[str] | None, str]:
    """The quoted names in the module of a registry ``entry`` (the config keys its class reads) and
    that module's path, noted in ``files``; (None, "") when there is no entry or the file is absent."""
    if entry is None:
        return None, ""
    rel = _module_file(entry[0])
    text = await read(rel)
    if text is None:
        return None, ""
    files.append(rel)
    return frozenset(_QUOTED.findall(text)), rel


def _module_file(mod: str) -> str:
    if mod.startswith("vllm."):
        return f"vllm/model_executor/models/{mod.split('.', 2)[-1].replace('.', '/')}.py" if mod.startswith("vllm.models.") else mod.replace(".", "/") + ".py"
    return f"{MODELS}/{mod}.py"


def _declares(text: str, cls: str, iface: str, depth: int = 0) -> bool:
    """Whether ``class cls(...)`` in ``text`` lists ``iface`` among its bases, directly or via a class of the same file."""
    m = re.search(rf"^class {re.escape(cls)}\(([^)]*)\)\s*:", text, re.M)
    if m is None:
        return False
    bases = [b.strip().split("[")[0] for b in m.group(1).replace("\n", " ").split(",") if b.strip()]
    if iface in bases:
        return True
    return depth < 3 and any(_declares(text, b, iface, depth + 1) for b in bases if b != cls)
