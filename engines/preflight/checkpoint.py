"""A checkpoint's own faults that dummy weights cannot show, read from its safetensors headers only.

A rehearsal (``engines/rehearsal``) builds every layer with random values, so a missing shard, a
weight name the model does not have or a dtype that differs is found only by the real load. Part of
that can be read without the weights: ``model.safetensors.index.json`` against each shard's header
(two small ranged reads per file, ``engines/safetensors_header``), and the decoder layers of the
header against the config's ``num_hidden_layers`` (every layer with the same tensor names).

What it does not do, said in its line: compare the names with the parameters the engine's model
class expects. Neither vLLM nor SGLang lists those without building the model, so that check is not
done, and the real load remains the only proof.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from servelab.engines.hosts.base import Host, HostUnreachable
from servelab.engines.weights.safetensors_header import HeaderError, SafetensorsHeader, read_header

INDEX = "model.safetensors.index.json"
#: A config's torch_dtype in a safetensors header's words.
DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}
NOT_COMPARED = "names not compared with the engine's expected parameters (neither engine lists them without building the model)"
_LAYER = re.compile(r"^(?P<pre>(?:.*\.)?layers)\.(?P<n>\d+)\.(?P<rest>.+)$")
MAX_PROBLEMS = 20


@dataclass(frozen=True)
class CheckpointCheck:
    """What the headers say. ``done``: the headers were read; ``problems``: faults the real load would hit."""

    done: bool
    detail: str
    files: int = 0
    tensors: int = 0
    dtypes: dict[str, int] | None = None
    problems: tuple[str, ...] = ()
    not_done: str = NOT_COMPARED

    @property
    def ok(self) -> bool:
        return self.done and not self.problems

    def line(self) -> str:
        if not self.done:
            return f"not done: {self.detail}"
        dtypes = ", ".join(f"{k} x{v}" for k, v in sorted((self.dtypes or {}).items()))
        head = f"{self.files} file(s), {self.tensors} tensors ({dtypes})"
        if self.problems:
            head += f"; {len(self.problems)} problem(s): " + "; ".join(self.problems[:3])
        else:
            head += "; index, shards and layers agree"
        return f"{head}; {self.not_done}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CheckpointCheck:
        return cls(
            done=bool(d.get("done")), detail=str(d.get("detail", "")), files=int(d.get("files") or 0), tensors=int(d.get("tensors") or 0),
            dtypes=dict(d.get("dtypes") or {}), problems=tuple(d.get("problems") or ()), not_done=str(d.get("not_done", NOT_COMPARED)),
        )


async def _json(host: Host, path: str) -> Any:
    return json.loads((await host.read_bytes(path, 0, 64_000_000)).decode("utf-8"))


async def check_checkpoint(host: Host, folder: str) -> CheckpointCheck:
    """Headers of every safetensors file of ``folder`` against its index and its config (never a weight)."""
    base = folder.rstrip("/")
    try:
        names = sorted(n for n in await host.listdir(base) if n.endswith(".safetensors"))
    except (OSError, HostUnreachable) as exc:
        return CheckpointCheck(False, f"cannot list {base}: {exc}")
    index: dict[str, str] | None = None
    try:
        raw = await _json(host, f"{base}/{INDEX}")
        index = {str(k): str(v) for k, v in (raw.get("weight_map") or {}).items()} if isinstance(raw, dict) else None
    except FileNotFoundError:
        index = None
    except (OSError, ValueError, HostUnreachable) as exc:
        return CheckpointCheck(False, f"{INDEX} does not read: {' '.join(str(exc).split())}")
    if not names and not index:
        return CheckpointCheck(False, f"no safetensors files in {base} (a .bin or other checkpoint: headers not read)")
    problems: list[str] = []
    wanted = sorted(set(names) | set((index or {}).values()))
    headers: dict[str, SafetensorsHeader] = {}

    async def one(name: str) -> None:
        try:
            headers[name] = await read_header(host, f"{base}/{name}")
        except FileNotFoundError:
            problems.append(f"missing shard {name}" + (" (named in the index)" if index and name in index.values() else ""))
        except (HeaderError, OSError) as exc:
            problems.append(f"{name}: {' '.join(str(exc).split())}")

    await asyncio.gather(*(one(n) for n in wanted))
    where: dict[str, str] = {}
    for name, header in sorted(headers.items()):
        for t in header.tensors:
            if t in where:
                problems.append(f"tensor {t} in both {where[t]} and {name}")
            where[t] = name
    if index is not None:
        for t, shard in sorted(index.items()):
            if shard in headers and t not in headers[shard].tensors:
                problems.append(f"index names {t} in {shard}, whose header lacks it")
        for t, shard in sorted(where.items()):
            if t not in index:
                problems.append(f"{t} in {shard} is not in the index")
    dtypes = Counter(info.dtype for h in headers.values() for info in h.tensors.values())
    try:
        config = await _json(host, f"{base}/config.json")
    except (OSError, ValueError, HostUnreachable):
        config = {}
    config = config.get("text_config", config) if isinstance(config.get("text_config"), dict) else config
    problems += _layer_problems(where, config)
    declared = DTYPES.get(str(config.get("torch_dtype") or config.get("dtype") or ""))
    floats = {k for k in dtypes if k in DTYPES.values()}
    if declared and floats and floats != {declared}:
        others = ", ".join(f"{k} x{dtypes[k]}" for k in sorted(floats - {declared}))
        problems.append(f"config says {declared}, headers also hold {others}")
    if len(problems) > MAX_PROBLEMS:
        problems = problems[:MAX_PROBLEMS] + [f"... and {len(problems) - MAX_PROBLEMS} more"]
    return CheckpointCheck(True, base, files=len(headers), tensors=len(where), dtypes=dict(dtypes), problems=tuple(problems))


def _layer_problems(where: Mapping[str, str], config: Mapping[str, Any]) -> list[str]:
    """Every decoder layer ``0..num_hidden_layers-1`` present, none lacking a tensor its neighbours have."""
    layers: dict[tuple[str, int], set[str]] = {}
    for t in where:
        m = _LAYER.match(t)
        if m:
            layers.setdefault((m["pre"], int(m["n"])), set()).add(m["rest"])
    out: list[str] = []
    n = config.get("num_hidden_layers")
    prefixes = sorted({pre for pre, _ in layers})
    for pre in prefixes:
        have = sorted(i for p, i in layers if p == pre)
        if isinstance(n, int) and not isinstance(n, bool) and pre.endswith("model.layers"):
            missing = sorted(set(range(n)) - set(have))
            if missing:
                out.append(f"{pre}: layer(s) {', '.join(map(str, missing[:5]))} missing of {n} (num_hidden_layers)")
        # a name both neighbours have (at an end, the next two): dense and MoE layers differ in runs, not singly
        dense = config.get("first_k_dense_replace")
        for i in have:
            pair = (i - 1, i + 1) if (pre, i - 1) in layers and (pre, i + 1) in layers else ((i + 1, i + 2) if (pre, i - 1) not in layers else (i - 1, i - 2))
            near = [layers[(pre, j)] for j in pair if (pre, j) in layers]
            if len(near) < 2 or (isinstance(dense, int) and (pre, i - 1) not in layers and dense > 0):
                continue
            lack = sorted(set.intersection(*near) - layers[(pre, i)])
            if lack:
                out.append(f"{pre}.{i} lacks {', '.join(lack[:3])}")
    return out
