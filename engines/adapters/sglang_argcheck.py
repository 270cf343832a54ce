"""SGLang's host-side argument check: SGLang's own resolution and checks, then servelab's for what they let through.

Runs on the host inside the frame ``engines/helpers/validate_args.py`` (which provides ``Failed``,
``one_line`` and ``run_argparse``), with the engine's interpreter: standard library and SGLang only.

SGLang's part is what its launcher does before loading anything: ``prepare_server_args`` (the
parser), ``ServerArgs.resolve_once()`` (where 0.5.23 really checks: speculative algorithm, model and
draft config, context length) and ``check_server_args()``. Resolution needs a device; when the
command names none, ``--device cuda`` is added for the check only (it never touches a GPU).
Releases before ``resolve_once`` checked in ``ServerArgs.__post_init__``, which parsing runs.

servelab's part covers what SGLang 0.5.23 accepts and fails on later or silently changes: a tensor
size that does not divide the attention heads, ``--mem-fraction-static`` outside (0, 1), EAGLE or
EAGLE-3 without a draft model (rejections), and a draft-token count SGLang lowers (a warning naming
both values).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servelab.engines.helpers.validate_args import Failed, one_line, run_argparse

#: Algorithms that draft with a separate model: SGLang 0.5.23 accepts them without one.
NEEDS_DRAFTER = ("EAGLE", "EAGLE3")


def _parse(sa: Any, flags: list[str]) -> Any:
    prepare = getattr(sa, "prepare_server_args", None)
    if prepare is not None:
        return run_argparse(prepare, flags)

    def parse(argv: list[str]) -> Any:  # releases without prepare_server_args
        parser = argparse.ArgumentParser(prog="sglang.launch_server")
        sa.ServerArgs.add_cli_args(parser)
        return sa.ServerArgs.from_cli_args(parser.parse_args(argv))

    try:
        return run_argparse(parse, flags)
    except Failed:
        raise
    except Exception as exc:  # __post_init__ checks of older releases
        raise Failed("config", one_line(exc)) from None


def _attention_heads(model_path: str) -> int | None:
    try:
        with open(os.path.join(model_path, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return None
    for part in (config, config.get("text_config") or {}, config.get("llm_config") or {}):
        heads = part.get("num_attention_heads") if isinstance(part, dict) else None
        if isinstance(heads, int) and heads > 0:
            return heads
    return None


def _servelab_checks(given: dict[str, Any], resolved: dict[str, Any]) -> list[str]:
    """Rejections (Failed, by servelab) and warnings for what SGLang lets through."""

    def value(name: str) -> Any:
        return resolved.get(name, given.get(name))

    fraction = value("mem_fraction_static")
    if fraction is not None and not 0.0 < float(fraction) < 1.0:
        raise Failed("servelab", f"--mem-fraction-static {fraction} is outside (0, 1): it is the share of GPU memory for weights and KV cache", by="servelab")
    algorithm = str(value("speculative_algorithm") or "").upper()
    if algorithm in NEEDS_DRAFTER and not value("speculative_draft_model_path"):
        raise Failed("servelab", f"--speculative-algorithm {algorithm} drafts with a separate model: set --speculative-draft-model-path (the drafter)", by="servelab")
    tp = int(value("tp_size") or 1)
    heads = _attention_heads(str(value("model_path") or ""))
    if heads is not None and tp > 1 and heads % tp:
        raise Failed("servelab", f"--tp-size {tp} does not divide the model's {heads} attention heads", by="servelab")
    warnings: list[str] = []
    asked, got = given.get("speculative_num_draft_tokens"), resolved.get("speculative_num_draft_tokens")
    if asked is not None and got is not None and int(got) < int(asked):
        why = ""
        if resolved.get("speculative_eagle_topk") == 1 and resolved.get("speculative_num_steps") is not None:
            why = f" (with --speculative-eagle-topk 1 it verifies --speculative-num-steps {resolved['speculative_num_steps']} + 1)"
        warnings.append(f"SGLang lowers --speculative-num-draft-tokens {asked} to {got}{why}")
    return warnings


def _fields(args: Any) -> dict[str, Any]:
    """The record's own fields as given (msgspec Struct in 0.5.23, a dataclass before)."""
    names = getattr(type(args), "__struct_fields__", None)
    if names is None:
        names = [f.name for f in dataclasses.fields(args)] if dataclasses.is_dataclass(args) else list(vars(args))
    return {name: getattr(args, name, None) for name in names}


def check(flags: list[str]) -> list[str]:
    """SGLang's checks, then servelab's; warnings, else Failed in SGLang's (or servelab's) words."""
    try:
        from sglang.srt import server_args as sa
    except Exception as exc:
        raise Failed("import", f"cannot import SGLang's server arguments: {one_line(exc)}") from None
    named_device = any(f == "--device" or f.startswith("--device=") for f in flags)
    args = _parse(sa, flags if named_device else [*flags, "--device", "cuda"])
    given = _fields(args)
    try:
        resolve = getattr(args, "resolve_once", None)
        if resolve is not None:
            resolve()
        check_args = getattr(args, "check_server_args", None)
        if check_args is not None:
            check_args()
    except SystemExit as exc:
        raise Failed("config", f"SGLang exited while checking the arguments (code {exc.code})") from None
    except Exception as exc:
        raise Failed("config", one_line(exc)) from None
    resolved_dict = getattr(args, "resolved_dict", None)
    resolved = dict(resolved_dict()) if resolved_dict is not None else _fields(args)
    return _servelab_checks(given, resolved)
