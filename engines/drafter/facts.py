"""What a model folder says about itself, read on the host through the host layer.

Only small files: ``config.json`` (and a multimodal target's ``text_config``, as Kimi-K2.5 has),
``generation_config.json``, ``tokenizer_config.json``, the safetensors headers and, for a drafter,
the ``d2t``/``t2d`` maps by offset. Nothing here knows an engine; ``rules`` and ``checks`` do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, overload

from servelab.engines.hosts.base import Host
from servelab.engines.weights.json_object import json_object
from servelab.engines.weights.safetensors_header import HeaderError, SafetensorsHeader, decode_ints, read_header, read_tensor
from servelab.engines.weights.torch_header import read_torch_header

#: Small JSON files only: a config larger than this is not a config.
MAX_JSON = 4_000_000
#: A checkpoint index (model.safetensors.index.json) is read for its weight names only; DeepSeek-V3's is ~9 MB.
MAX_INDEX = 64_000_000
#: Top-level fields of a speculators-format config that its reader copies into the layer config
#: (vLLM ``transformers_utils/configs/speculators/algos.py``: update_eagle3).
SPECULATORS_KEYS = ("draft_vocab_size", "target_hidden_size", "eagle_aux_hidden_state_layer_ids", "norm_before_residual", "norm_before_fc")
#: Tokenizer-config keys worth keeping (the rest, e.g. a chat template, is large and unused here).
TOKENIZER_KEYS = ("bos_token", "eos_token", "pad_token", "tokenizer_class", "model_max_length")


class FactsError(Exception):
    """A folder or file that cannot be read as a model; the message is one line."""


@dataclass(frozen=True)
class MapSummary:
    """What the d2t map says, computed from its values (the values themselves stay on this side)."""

    size: int
    dtype: str
    out_of_range: int
    first_bad: tuple[int, int] | None  # (i, d2t[i]) of the first entry outside the target vocab
    lowest: int  # min of i + d2t[i]
    highest: int  # max of i + d2t[i]
    holds_ids: bool  # d2t[i] == i for all i: someone stored target ids, not offsets


class _Int:
    """A read-only attribute: an integer under ``key`` in the text config, else in the config (None when neither has one)."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.__doc__ = f"``{key}``"

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> _Int: ...

    @overload
    def __get__(self, obj: ModelFacts, owner: type[Any]) -> int | None: ...

    def __get__(self, obj: ModelFacts | None, owner: type[Any]) -> _Int | int | None:
        return self if obj is None else obj._int(self.key)


@dataclass(frozen=True)
class ModelFacts:
    """One folder's config facts; ``text`` is the language model's part (``text_config`` when present)."""

    path: str
    config: dict[str, Any]
    text: dict[str, Any]
    generation: dict[str, Any] = field(default_factory=dict)
    tokenizer: dict[str, Any] = field(default_factory=dict)
    headers: tuple[SafetensorsHeader, ...] = ()
    d2t: MapSummary | None = None
    t2d_true: int | None = None
    problems: tuple[str, ...] = ()
    #: Weight names of the checkpoint's index (or headers), read for a target served with MTP; None: not read.
    weight_names: frozenset[str] | None = None
    weight_names_source: str = ""

    @property
    def speculators_type(self) -> str | None:
        """``speculators_model_type`` of a speculators-format config (its layer config is ``text``)."""
        v = self.config.get("speculators_model_type")
        return str(v) if isinstance(v, str) and isinstance(self.config.get("transformer_layer_config"), dict) else None

    @property
    def recorded_tokens(self) -> int | None:
        """The tokens per step the drafter records (speculators: the default proposal method's speculative_tokens)."""
        spec = self.config.get("speculators_config")
        methods = spec.get("proposal_methods") if isinstance(spec, dict) else None
        if not isinstance(methods, list) or not methods:
            return None
        default = spec.get("default_proposal_method") if isinstance(spec, dict) else None
        chosen = next((m for m in methods if isinstance(m, dict) and m.get("proposal_type") == default), methods[0])
        v = chosen.get("speculative_tokens") if isinstance(chosen, dict) else None
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    @property
    def architectures(self) -> tuple[str, ...]:
        return tuple(str(a) for a in (self.config.get("architectures") or ()))

    @property
    def text_architectures(self) -> tuple[str, ...]:
        return tuple(str(a) for a in (self.text.get("architectures") or self.config.get("architectures") or ()))

    @property
    def model_type(self) -> str | None:
        v = self.config.get("model_type")
        return str(v) if v is not None else None

    @property
    def text_model_type(self) -> str | None:
        v = self.text.get("model_type", self.config.get("model_type"))
        return str(v) if v is not None else None

    def _int(self, key: str) -> int | None:
        for d in (self.text, self.config):
            v = d.get(key)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
        return None

    vocab_size = _Int("vocab_size")
    hidden_size = _Int("hidden_size")
    num_layers = _Int("num_hidden_layers")
    max_positions = _Int("max_position_embeddings")
    draft_vocab_size = _Int("draft_vocab_size")
    target_hidden_size = _Int("target_hidden_size")

    @property
    def eagle_config(self) -> dict[str, Any]:
        v = self.config.get("eagle_config")
        return v if isinstance(v, dict) else {}

    @property
    def aux_layer_ids(self) -> tuple[int, ...] | None:
        """EAGLE-3's ``eagle_aux_hidden_state_layer_ids`` (top level or under ``eagle_config``)."""
        for d in (self.config, self.eagle_config):
            v = d.get("eagle_aux_hidden_state_layer_ids")
            if isinstance(v, list) and v and all(isinstance(i, int) for i in v):
                return tuple(v)
        return None

    def flags(self) -> dict[str, Any]:
        """Boolean switches of the config and its ``eagle_config`` (where norm flags live)."""
        out: dict[str, Any] = {}
        for d in (self.config, self.eagle_config):
            out.update({k: v for k, v in d.items() if isinstance(v, bool)})
        return out

    def special_ids(self) -> dict[str, int | tuple[int, ...] | None]:
        """bos/eos/pad ids: generation_config.json wins over config.json, as generation reads it."""
        out: dict[str, int | tuple[int, ...] | None] = {}
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
            value: Any = None
            for d in (self.generation, self.config, self.text):
                if d.get(key) is not None:
                    value = d[key]
                    break
            if isinstance(value, list):
                value = tuple(int(v) for v in value if isinstance(v, int))
            out[key] = value if isinstance(value, (int, tuple)) and not isinstance(value, bool) else None
        return out

    def tensor(self, name: str) -> tuple[SafetensorsHeader, Any] | None:
        for h in self.headers:
            info = h.get(name)
            if info is not None:
                return h, info
        return None

    def tensor_names(self) -> set[str]:
        return {n for h in self.headers for n in h.tensors}


async def read_json(host: Host, path: str) -> dict[str, Any] | None:
    """A small JSON object file, or None when absent; FactsError when it is not one."""
    try:
        raw = await host.read_bytes(path, 0, MAX_JSON + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise FactsError(f"cannot read {path}: {exc}") from None
    if len(raw) > MAX_JSON:
        raise FactsError(f"{path} is larger than {MAX_JSON} bytes: not a config file")
    try:
        return json_object(raw)
    except ValueError as exc:
        raise FactsError(f"{path} is not valid JSON: {exc}") from None
    except TypeError:
        raise FactsError(f"{path} is not a JSON object") from None


def _join(folder: str, name: str) -> str:
    return f"{folder.rstrip('/')}/{name}"


async def read_model(host: Host, folder: str, *, weights: bool = False, target_vocab: int | None = None) -> ModelFacts:
    """Configs of ``folder``; with ``weights``, also its safetensors headers and the d2t/t2d maps."""
    config = await read_json(host, _join(folder, "config.json"))
    if config is None:
        raise FactsError(f"{folder} has no config.json")
    nested = config.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else config
    layer = config.get("transformer_layer_config")
    if isinstance(layer, dict) and "speculators_model_type" in config:
        # speculators format: the engine builds the drafter from the nested layer config plus these fields
        text = {**layer, **{k: config[k] for k in SPECULATORS_KEYS if config.get(k) is not None}}
    generation = await read_json(host, _join(folder, "generation_config.json")) or {}
    tok_raw = await read_json(host, _join(folder, "tokenizer_config.json")) or {}
    tokenizer = {k: tok_raw[k] for k in TOKENIZER_KEYS if k in tok_raw}
    facts = ModelFacts(path=folder, config=config, text=text, generation=generation, tokenizer=tokenizer)
    if not weights:
        return facts
    return await _with_weights(host, facts, target_vocab)


async def weight_names(host: Host, folder: str) -> tuple[frozenset[str] | None, str]:
    """The checkpoint's tensor names: the index's weight_map keys, else every safetensors header's names."""
    path = _join(folder, "model.safetensors.index.json")
    try:
        raw = await host.read_bytes(path, 0, MAX_INDEX + 1)
    except FileNotFoundError:
        raw = None
    except OSError as exc:
        raise FactsError(f"cannot read {path}: {exc}") from None
    if raw is not None:
        try:
            doc = json_object(raw)
        except (ValueError, TypeError):
            raise FactsError(f"{path} is not a JSON object") from None
        wm = doc.get("weight_map")
        if isinstance(wm, dict):
            names = {str(k) for k in wm}
            # a file the index does not list (an MTP layer shipped beside it) still loads: read its header too
            extra = sorted(n for n in await host.listdir(folder) if n.endswith(".safetensors") and n not in set(map(str, wm.values())))
            for name in extra:
                try:
                    names.update((await read_header(host, _join(folder, name))).tensors)
                except (HeaderError, OSError):
                    continue
            return frozenset(names), "model.safetensors.index.json" + (f" and {', '.join(extra)}" if extra else "")
    files = [n for n in await host.listdir(folder) if n.endswith(".safetensors")]
    if not files:
        return None, "no index and no *.safetensors"
    found: set[str] = set()
    for name in sorted(files):
        try:
            found.update((await read_header(host, _join(folder, name))).tensors)
        except (HeaderError, OSError):
            continue
    return frozenset(found), f"{len(files)} safetensors header(s)"


async def _with_weights(host: Host, facts: ModelFacts, target_vocab: int | None) -> ModelFacts:
    listing = await host.listdir(facts.path)
    names = [n for n in listing if n.endswith(".safetensors")]
    problems: list[str] = []
    headers: list[SafetensorsHeader] = []
    for name in sorted(names):
        try:
            headers.append(await read_header(host, _join(facts.path, name)))
        except (HeaderError, OSError) as exc:
            problems.append(str(exc))
    if not names:  # a torch.save checkpoint (the original EAGLE heads ship pytorch_model.bin)
        for name in sorted(n for n in listing if n.endswith(".bin") and n.startswith("pytorch_model")):
            try:
                headers.append(await read_torch_header(host, _join(facts.path, name)))
            except (HeaderError, OSError) as exc:
                problems.append(str(exc))
    d2t: MapSummary | None = None
    t2d_true: int | None = None
    for h in headers:
        info = h.get("d2t")
        if info is not None and d2t is None:
            try:
                values = decode_ints(info, await read_tensor(host, h, "d2t"))
                d2t = summarize_d2t(values, info.dtype, target_vocab)
            except (HeaderError, OSError) as exc:
                problems.append(str(exc))
        info = h.get("t2d")
        if info is not None and t2d_true is None:
            try:
                t2d_true = sum(1 for v in decode_ints(info, await read_tensor(host, h, "t2d")) if v)
            except (HeaderError, OSError) as exc:
                problems.append(str(exc))
    return ModelFacts(
        path=facts.path, config=facts.config, text=facts.text, generation=facts.generation, tokenizer=facts.tokenizer,
        headers=tuple(headers), d2t=d2t, t2d_true=t2d_true, problems=tuple(problems),
    )


def summarize_d2t(values: list[int], dtype: str, target_vocab: int | None) -> MapSummary:
    """Where ``i + d2t[i]`` lands for every draft id i (the engines add the offset to the draft id)."""
    mapped = [i + v for i, v in enumerate(values)]
    bad = [(i, values[i]) for i, t in enumerate(mapped) if t < 0 or (target_vocab is not None and t >= target_vocab)]
    holds_ids = len(values) > 1 and all(v == i for i, v in enumerate(values))
    return MapSummary(
        size=len(values), dtype=dtype, out_of_range=len(bad), first_bad=bad[0] if bad else None,
        lowest=min(mapped) if mapped else 0, highest=max(mapped) if mapped else 0, holds_ids=holds_ids,
    )
