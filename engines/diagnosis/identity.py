"""Which drafter a run served, by its weights, and the config values that change what the same
weights compute: the local reference is "the best earlier run of this drafter", and a drafter
copied to another folder, or whose config was edited in place, is still the same drafter.

The fingerprint reads no weights in bulk: the safetensors headers (names, shapes, dtypes) and the
first bytes of each tensor, tensors named like the vocabulary maps (``d2t``, ``t2d``) left out,
since removing a map is a configuration change to the same trained weights.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from servelab.engines.drafter.facts import FactsError, read_model
from servelab.engines.errors import ServelabError
from servelab.engines.hosts.base import HostUnreachable
from servelab.engines.weights.safetensors_header import HeaderError
from servelab.engines.diagnosis.model import DrafterIdentity, Provenance
from servelab.engines.drafter.provenance import judge, recorded_target

if TYPE_CHECKING:
    from servelab.engines.hosts.base import Host
    from servelab.engines.adapters.exchange import TargetIdentity

#: Bytes of each tensor that go into the fingerprint.
SAMPLE_BYTES = 256
MAPS = frozenset({"d2t", "t2d"})


def settings_of(config: dict[str, Any], tensor_names: set[str]) -> dict[str, str]:
    """The config values that change what the engine computes with the same weights."""
    out: dict[str, str] = {}
    eagle = config.get("eagle_config")
    if isinstance(eagle, dict):
        for k, v in sorted(eagle.items()):
            out[f"eagle_config.{k}"] = json.dumps(v, sort_keys=True)
    for k, v in sorted(config.items()):
        if "norm" in k.lower() and not isinstance(v, (dict, list)) and k != "rms_norm_eps":
            out[k] = json.dumps(v)
    for k in ("draft_vocab_size", "num_aux_hidden_states", "target_hidden_size"):
        if k in config:
            out[k] = json.dumps(config[k])
    out["d2t"] = "present" if "d2t" in tensor_names else "absent"
    return out


async def drafter_identity(host: Host, folder: str) -> DrafterIdentity | None:
    """None when the folder cannot be read as a safetensors checkpoint (the diagnosis goes on without)."""
    try:
        facts = await read_model(host, folder, weights=True)
        if not facts.headers:
            return None
        h = hashlib.sha256()
        for header in facts.headers:
            for name in sorted(n for n in header.tensors if n not in MAPS):
                info = header.tensors[name]
                h.update(f"{name}|{info.dtype}|{info.shape}|".encode())
                size = min(SAMPLE_BYTES, info.end - info.begin)
                h.update(await host.read_bytes(header.path, header.data_start + info.begin, size))
        return DrafterIdentity(h.hexdigest()[:16], settings_of(facts.config, facts.tensor_names()))
    except (FactsError, HeaderError, ServelabError, HostUnreachable, OSError):
        return None


async def provenance_of(host: Host, python: str, draft: str, target_path: str, target: TargetIdentity | None) -> Provenance | None:
    """What the drafter's training record says it was trained for, judged against the served target
    (None when it records nothing or cannot be read)."""
    try:
        rec = await recorded_target(host, draft)
        if rec.empty:
            return None
        facts = await read_model(host, target_path)
    except (FactsError, ServelabError, HostUnreachable, OSError):
        return None
    matches, why = judge(rec, draft, target_path, target, facts.text_model_type)
    return Provenance([f"{where} = {value}" for where, value in rec.names], rec.fingerprint, matches, why)
