"""Which NextN/MTP draft SGLang builds for a target, read from the installed SGLang's own rewrite.

SGLang serves a target's MTP layers as a draft model of the same checkpoint: ``ModelConfig._config_draft_model``
(``sglang/srt/configs/model_config.py``) renames the target's architecture for the draft
(``if is_draft_model and self.hf_config.architectures[0] in [...]: ... = "DeepseekV3ForCausalLMNextN"``).
:func:`nextn_map` reads every such block with ``ast`` (nothing of SGLang is imported); a target whose
architecture no block renames is loaded whole as its own draft, which is not MTP.
"""

from __future__ import annotations

import ast

FUNCTION = "_config_draft_model"
FILE = "sglang/srt/configs/model_config.py"


def _is_arch0(node: ast.expr) -> bool:
    """``self.hf_config.architectures[0]``."""
    return (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "architectures"
            and isinstance(node.slice, ast.Constant) and node.slice.value == 0)


def _sources(test: ast.expr) -> list[str]:
    out: list[str] = []
    for cmp in (n for n in ast.walk(test) if isinstance(n, ast.Compare)):
        if not _is_arch0(cmp.left):
            continue
        for op, right in zip(cmp.ops, cmp.comparators):
            if isinstance(op, ast.Eq) and isinstance(right, ast.Constant) and isinstance(right.value, str):
                out.append(right.value)
            elif isinstance(op, ast.In) and isinstance(right, (ast.List, ast.Tuple, ast.Set)):
                out.extend(e.value for e in right.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return out


def _renamed(body: list[ast.stmt]) -> str | None:
    for st in body:
        for node in ast.walk(st):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                if any(_is_arch0(t) for t in node.targets):
                    return node.value.value
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.List) and node.value.elts:
                first = node.value.elts[0]
                if any(isinstance(t, ast.Attribute) and t.attr == "architectures" for t in node.targets) and isinstance(first, ast.Constant):
                    return str(first.value)
    return None


def _fixed_layers(body: list[ast.stmt]) -> int | None:
    """``self.hf_config.num_nextn_predict_layers = 1`` in the block: SGLang sets the count itself."""
    for st in body:
        for node in ast.walk(st):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, int)
                    and any(isinstance(t, ast.Attribute) and t.attr == "num_nextn_predict_layers" for t in node.targets)):
                return int(node.value.value)
    return None


def nextn_map(source: str) -> dict[str, tuple[str, int, int | None]]:
    """Target architecture -> (its NextN draft architecture, the line of the block, the layer count SGLang sets itself)."""
    out: dict[str, tuple[str, int, int | None]] = {}
    for fn in (n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == FUNCTION):
        for node in ast.walk(fn):
            if isinstance(node, ast.If):
                new = _renamed(node.body)
                if new:
                    for src in _sources(node.test):
                        out.setdefault(src, (new, node.lineno, _fixed_layers(node.body)))
    return out
