"""What a drafter's own files say about the target it was trained for, against the served target.

Where drafters record it (read on the host, small files only):

- a model card's ``base_model`` (``README.md`` front matter; Hugging Face's field, a name or a list),
  as the published EAGLE-3 heads carry it (``AQ-MedAI/Kimi-K2-Instruct-eagle3``: ``moonshotai/Kimi-K2-Instruct``);
- training arguments saved beside the weights (``training_args.json``, ``args.json``):
  ``target_model_path`` (SpecForge's ``--target-model-path``), ``base_model_name_or_path``,
  ``model_name_or_path`` (EAGLE's ``--basepath`` as ``base_model_path``), and servelab's own
  ``target_fingerprint`` (written by ``envs/tiny/build.py``);
- config fields: ``target_model``, ``target_model_path``, ``base_model``, ``target_model_type``
  (SpecForge's VLM drafters), ``target_fingerprint``.

SpecForge also saves its arguments inside ``training_state.pt``, a pickle: servelab never unpickles a
file from a model folder, so that copy is not read (save ``training_args.json`` beside the weights).

A recorded fingerprint decides (the same weights or not); a name is compared with the served
target's path by its last component (``moonshotai/Kimi-K2.5`` and ``/models/Kimi-K2.5`` agree).
"""

from __future__ import annotations

import os.path
import re
from dataclasses import dataclass, field

from servelab.engines.drafter.facts import FactsError, read_json
from servelab.engines.hosts.base import Host
from servelab.engines.adapters.exchange import TargetIdentity

ARGS_FILES = ("training_args.json", "args.json", "train_args.json")
NAME_KEYS = ("target_model_path", "target_model", "base_model", "base_model_path", "base_model_name_or_path", "basepath")
FINGERPRINT_KEYS = ("target_fingerprint",)
#: Bytes of a model card read for its front matter.
CARD_BYTES = 64_000


@dataclass(frozen=True)
class RecordedTarget:
    """The target as the drafter's training recorded it: ``names`` as ``(where, value)``."""

    names: list[tuple[str, str]] = field(default_factory=list)
    fingerprint: str = ""
    fingerprint_where: str = ""
    model_type: str = ""

    @property
    def empty(self) -> bool:
        return not self.names and not self.fingerprint and not self.model_type


def card_base_models(text: str) -> list[str]:
    """``base_model`` of a model card's YAML front matter (a scalar or a list), without a YAML parser."""
    if not text.startswith("---"):
        return []
    end = text.find("\n---", 3)
    lines = text[3:end if end > 0 else len(text)].splitlines()
    out: list[str] = []
    for i, line in enumerate(lines):
        m = re.match(r"^base_model\s*:\s*(.*)$", line)
        if not m:
            continue
        value = m.group(1).strip().strip("'\"")
        if value:
            out.append(value)
            continue
        for item in lines[i + 1:]:
            li = re.match(r"^\s*-\s*(.+)$", item)
            if not li:
                break
            out.append(li.group(1).strip().strip("'\""))
    return [v for v in out if v and v not in ("null", "~")]


async def recorded_target(host: Host, draft_path: str) -> RecordedTarget:
    """Everything the drafter's folder records about its target (empty when it records nothing)."""
    names: list[tuple[str, str]] = []
    fingerprint, fp_where, model_type = "", "", ""
    try:
        card = (await host.read_bytes(f"{draft_path.rstrip('/')}/README.md", 0, CARD_BYTES)).decode("utf-8", "replace")
    except OSError:
        card = ""
    names += [("README.md base_model", v) for v in card_base_models(card)]
    for fname in ("config.json", *ARGS_FILES):
        try:
            doc = await read_json(host, f"{draft_path.rstrip('/')}/{fname}")
        except FactsError:  # an unreadable record is no record
            doc = None
        if not doc:
            continue
        for key in NAME_KEYS:
            if isinstance(doc.get(key), str) and doc[key].strip():
                names.append((f"{fname} {key}", doc[key].strip()))
        for key in FINGERPRINT_KEYS:
            if isinstance(doc.get(key), str) and doc[key] and not fingerprint:
                fingerprint, fp_where = doc[key], f"{fname} {key}"
        if fname == "config.json" and isinstance(doc.get("target_model_type"), str):
            model_type = doc["target_model_type"]
    return RecordedTarget(list(dict.fromkeys(names)), fingerprint, fp_where, model_type)


def _stem(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", os.path.basename(os.path.normpath(name.rstrip("/"))).lower())


def _path_stems(path: str) -> set[str]:
    """The stems of every component of the served path, a Hugging Face cache's ``models--org--name`` split too
    (``.../models--moonshotai--Kimi-K2.5/snapshots/<sha>`` is ``Kimi-K2.5``)."""
    out: set[str] = set()
    for part in os.path.normpath(path).split(os.sep):
        for piece in [part, *part.split("--")]:
            stem = _stem(piece)
            if len(stem) >= 3:
                out.add(stem)
    return out


def names_target(value: str, draft_path: str, target_path: str) -> bool:
    """A recorded name is the served target: the same folder (a relative name resolved from the drafter's),
    or its last component among the served path's components (an org/name hub id, a cache snapshot).
    Never by containment: ``Llama-3.1-8B`` is not ``Llama-3.1-8B-Instruct``, nor ``target`` ``target-variant``."""
    resolved = os.path.normpath(os.path.join(draft_path, value)) if value.startswith(".") else os.path.normpath(value)
    if resolved == os.path.normpath(target_path):
        return True
    name = _stem(value)
    return bool(name) and name in _path_stems(target_path)


def judge(rec: RecordedTarget, draft_path: str, target_path: str, target: TargetIdentity | None,
          target_model_type: str | None) -> tuple[bool | None, str]:
    """(True: the record names this target; False: another; None: it cannot be told) and why, in words."""
    if rec.fingerprint and target is not None:
        if rec.fingerprint == target.fingerprint:
            return True, f"{rec.fingerprint_where} = {rec.fingerprint}, this target's fingerprint"
        return False, f"{rec.fingerprint_where} = {rec.fingerprint}; the served target's weights are {target.fingerprint}"
    if rec.model_type and target_model_type and rec.model_type != target_model_type:
        return False, f"config.json target_model_type = {rec.model_type}; the served target is a {target_model_type}"
    if not rec.names:
        return None, "the drafter records no target"
    for where, value in rec.names:
        if names_target(value, draft_path, target_path):
            return True, f"{where} = {value}"
    where, value = rec.names[0]
    return False, f"{where} = {value}; the served target is {target_path}"
