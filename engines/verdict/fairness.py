"""Were two servers set up comparably? Their resolved settings in common terms, side by side.

Each adapter says where its engine's log states the settings it resolved (``SettingsGrammar``):
vLLM's ``non-default args: {...}`` line and its ``KV cache size: N tokens``; SGLang's
``server_args={...}`` and its ``max_total_num_tokens=N, ... max_running_requests=N, context_len=N``.
The probe stores them (``identity.resolved_settings``). A difference in a setting that moves
throughput or latency (:data:`COMMON`'s ``moves``) makes a cross-engine verdict "not comparable:
KV cache (tokens) differs (1874688 vs 2048: the tokens the KV cache holds, how many requests fit at
once)", and :func:`aligned_twin` writes the experiment with that setting aligned.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

import tomlkit

from servelab.engines.adapters.exchange import SettingsGrammar

#: Read at most this much of a log's head (the settings are said before the server is ready).
HEAD_BYTES = 4 << 20
#: Two numbers within this ratio are the same setting (a KV cache rounded to blocks).
SAME_WITHIN = 1.10
DEFAULT = "default"
#: Values that leave the setting to the engine or the model ("auto" dtype is the model's): not known to differ.
UNSTATED = frozenset({DEFAULT, "auto"})


@dataclass(frozen=True)
class Setting:
    key: str
    label: str
    meaning: str
    moves: bool


COMMON: tuple[Setting, ...] = (
    Setting("kv_cache_tokens", "KV cache (tokens)", "the tokens the KV cache holds, how many requests fit at once", True),
    Setting("max_batch", "batch limit (sequences)", "the most requests decoded together", True),
    Setting("max_batched_tokens", "tokens per step / prefill chunk", "how much prefill one step takes", True),
    Setting("max_len", "maximum length", "the longest request the server accepts", True),
    Setting("eager", "eager mode (no CUDA graphs)", "every step launched kernel by kernel", True),
    Setting("chunked_prefill", "chunked prefill", "long prompts split across steps", True),
    Setting("prefix_caching", "prefix caching", "shared prompt heads computed once", True),
    Setting("dtype", "dtype", "the precision of weights and activations", True),
    Setting("quantization", "quantization", "the weights' quantization", True),
    Setting("kv_cache_dtype", "KV cache dtype", "the KV cache's precision", True),
    Setting("memory_fraction", "memory fraction", "the memory given to the engine (its tokens are what count)", False),
    Setting("attention_backend", "attention backend", "the attention kernels", False),
    Setting("device", "device", "where the model runs", False),
    Setting("sampling", "sampling defaults", "what a request that sets no temperature gets; the probe sets its own (greedy)", False),
)
#: The line uvicorn prints once a server's API is up: a sampling line is printed before it or never.
_API_UP = "Application startup complete."
#: Settings that mean nothing on a CPU (no CUDA graphs there, whatever the flag says).
GPU_ONLY = frozenset({"eager"})
_BY_KEY = {s.key: s for s in COMMON}


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def resolved_settings(grammar: SettingsGrammar, log: str | bytes) -> dict[str, str]:
    """The settings a log says its engine resolved, by common key (empty when it says none)."""
    text = log[:HEAD_BYTES].decode("utf-8", "replace") if isinstance(log, bytes) else log[:HEAD_BYTES]
    out: dict[str, str] = {}
    args = re.search(grammar.args_line, text, re.MULTILINE)
    if args is not None:
        try:
            given = ast.literal_eval(args.group(1))  # a literal, never run
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            given = None
        if isinstance(given, dict):
            out.update(_named(grammar, given))
    for pattern in grammar.resolved:
        found = re.search(pattern, text)
        if found is not None:
            out.update({k: v.replace(",", "") for k, v in found.groupdict().items() if v is not None})
    sampling = _sampling(grammar, text)
    if sampling is not None:
        out["sampling"] = sampling
    return out


def _named(grammar: SettingsGrammar, given: dict[Any, Any]) -> dict[str, str]:
    """The arguments of ``given`` that have a common meaning, by common key (vLLM's unlisted ones: default)."""
    out: dict[str, str] = {}
    for arg, key, inverted in grammar.names:
        if arg in given and given[arg] is not None:
            value = given[arg]
            out[key] = _text((not value) if inverted and isinstance(value, bool) else value)
        elif not grammar.states_defaults:
            out.setdefault(key, DEFAULT)
    return out


def _at(obj: Any, path: str) -> Any:
    """``obj``'s value at a dotted path (``internal_states.0.x``), None where the path leads nowhere."""
    for part in path.split("."):
        if isinstance(obj, dict):
            obj = obj.get(part)
        elif isinstance(obj, list) and part.isdigit() and int(part) < len(obj):
            obj = obj[int(part)]
        else:
            return None
    return obj


def served_settings(grammar: SettingsGrammar, info: Any) -> dict[str, str]:
    """The settings a running server says it resolved (the JSON object from one of ``grammar.info_paths``),
    by common key; empty when it is not such an object. The figures it worked out itself win over
    the arguments it was given (a token pool sized from memory against a ``max_total_tokens`` of None).
    The sampling defaults stay the log's: the model's generation config merges into them, and no field says the result."""
    if not isinstance(info, dict):
        return {}
    out = _named(grammar, info)
    for path, key in grammar.info_figures:
        value = _at(info, path)
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            out[key] = _text(value)
    return out


def _sampling(grammar: SettingsGrammar, text: str) -> str | None:
    """The server's default sampling parameters, ``temperature=0.6, top_p=0.95`` (sorted), ``none``
    when its API came up without saying any, None when the log does not tell (not up yet)."""
    if not grammar.sampling_line:
        return None
    found = re.search(grammar.sampling_line, text, re.MULTILINE)
    if found is None:
        return "none" if _API_UP in text else None
    try:
        given = ast.literal_eval(found.group(1))  # a literal, never run
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(given, dict):
        return None
    return ", ".join(f"{k}={_text(v)}" for k, v in sorted(given.items(), key=lambda kv: str(kv[0]))) or "none"


@dataclass(frozen=True)
class Difference:
    setting: Setting
    a: str
    b: str

    def words(self) -> str:
        return f"{self.setting.label} differs ({self.a} vs {self.b}: {self.setting.meaning})"


def _same(a: str, b: str) -> bool:
    try:
        x, y = float(a), float(b)
    except ValueError:
        return a.lower() == b.lower()
    return x == y or (min(x, y) > 0 and max(x, y) / min(x, y) <= SAME_WITHIN)


def _holds(value: str, need: int | None) -> bool:
    try:
        return need is not None and float(value) >= need
    except ValueError:
        return False


def differences(a: dict[str, str], b: dict[str, str], need_tokens: int | None = None) -> list[Difference]:
    """Settings both servers state with different values (a vLLM default against a stated value is not known to differ).

    ``need_tokens``: the KV tokens the measurement can use at most (its concurrency x the longest
    request); two KV caches that both hold it cannot move its figures, so that difference is shown
    but does not move. A setting that means nothing on a CPU (``GPU_ONLY``) never moves there."""
    on_cpu = "cpu" in (a.get("device"), b.get("device"))
    out = []
    for s in COMMON:
        va, vb = a.get(s.key), b.get(s.key)
        if va is None or vb is None or {va, vb} & UNSTATED or _same(va, vb):
            continue
        moves = s.moves and not (on_cpu and s.key in GPU_ONLY)
        if s.key == "kv_cache_tokens" and _holds(va, need_tokens) and _holds(vb, need_tokens):
            moves = False
        out.append(Difference(s if moves == s.moves else Setting(s.key, s.label, s.meaning, moves), va, vb))
    return out


def need_tokens(concurrency: int | None, settings: list[dict[str, str]], max_tokens: int | None) -> int | None:
    """The most KV tokens a probe can hold at once: its concurrency x the longest request either server
    accepts (else max_tokens plus a generous prompt, 2048 tokens)."""
    if not concurrency:
        return None
    lens = []
    for st in settings:
        try:
            lens.append(int(float(st.get("max_len", ""))))
        except ValueError:
            continue
    longest = max(lens) if lens else (max_tokens or 0) + 2048
    return int(concurrency) * longest


def not_comparable(a: dict[str, str], b: dict[str, str], need: int | None = None) -> str:
    """``not comparable: KV cache (tokens) differs (...)`` when a throughput-moving setting differs, else ""."""
    moving = [d for d in differences(a, b, need) if d.setting.moves]
    return "not comparable: " + "; ".join(d.words() for d in moving) if moving else ""


def label(key: str) -> str:
    return _BY_KEY[key].label if key in _BY_KEY else key


def aligned_twin(experiment_toml: str, grammar: SettingsGrammar, mine: dict[str, str], target: dict[str, str], name: str,
                 need: int | None = None) -> tuple[str, list[str]]:
    """The experiment's text with each throughput-moving setting that differs from ``target`` set to
    ``target``'s value in ``[engine_args]`` (``name``: the twin's, said in its description); with the differences it cannot align
    (the engine has no argument for them)."""
    doc = tomlkit.parse(experiment_toml)
    args = doc.setdefault("engine_args", tomlkit.table())
    keys = dict(grammar.engine_args)
    left: list[str] = []
    for d in differences(mine, target, need):
        if not d.setting.moves:
            continue
        arg = keys.get(d.setting.key)
        if arg is None:
            left.append(d.words())
            continue
        value = d.b
        if value in ("yes", "no"):
            if value == "yes":
                args[arg] = True
            elif arg in args:
                del args[arg]
            else:
                left.append(d.words() + " (the engine's flag only turns it on)")
            continue
        try:
            args[arg] = int(value)
        except ValueError:
            try:
                args[arg] = float(value)
            except ValueError:
                args[arg] = value
    desc = doc.get("description")
    doc["description"] = f"{name}: {desc or 'the experiment'}, aligned to its comparison partner's resolved settings"
    return tomlkit.dumps(doc), left
