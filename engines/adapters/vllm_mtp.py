"""Which MTP model vLLM builds for a target, read by walking the installed vLLM's own rewrite.

vLLM turns a target's config into its MTP draft's config in ``SpeculativeConfig.hf_config_override``
(``config/speculative.py``): a chain of ``if hf_config.model_type == ...`` / ``architectures[0] ...``
blocks that rename the model type (``deepseek_v3`` -> ``deepseek_mtp``), set the MTP architecture and
``n_predict`` from the target's layer count (``num_nextn_predict_layers``, ``mtp_num_hidden_layers``,
``num_mtp_modules``), or raise. With ``method = "mtp"`` vLLM then refuses a draft whose model type is
not one of ``MTPModelTypes`` (``Unsupported speculative method: 'mtp'``).

:func:`resolve` walks that function's syntax tree (``ast``; nothing of vLLM is imported or run) over the
target's config as a dict: tests it cannot decide are taken as false, assignments and
``hf_config.update({...})`` are applied, a ``raise`` is recorded. A vLLM release that adds a model
family adds its block to that function, and this reads it without a change here.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, field
from typing import Any

FUNCTION = "hf_config_override"


class _Unknown:
    """A value the walk cannot know (a constant imported from a model file, an unsupported call)."""

    def __repr__(self) -> str:
        return "?"


UNKNOWN: Any = _Unknown()


@dataclass(frozen=True)
class MtpResolution:
    """What vLLM's rewrite makes of one target for ``method = "mtp"``."""

    model_type: str | None
    architecture: str | None
    #: The MTP layer count vLLM takes (None: the target has no such key; UNKNOWN folds to None too).
    n_predict: int | None
    #: The config key n_predict was read from ("num_nextn_predict_layers"), or the constant's origin.
    count_key: str | None
    #: Line of the block whose test matched (the evidence), 0 when none did.
    line: int
    #: The message of a ``raise`` the rewrite reaches for this target.
    raises: str | None
    #: The model types vLLM accepts as an MTP draft (``MTPModelTypes``).
    mtp_types: frozenset[str] = field(repr=False, default=frozenset())

    @property
    def supported(self) -> bool:
        return self.raises is None and self.model_type in self.mtp_types


def mtp_model_types(source: str) -> frozenset[str]:
    """The strings of ``MTPModelTypes = Literal[...]``."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "MTPModelTypes" for t in node.targets):
            return frozenset(c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and isinstance(c.value, str))
    return frozenset()


def _function(source: str) -> ast.FunctionDef | None:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == FUNCTION:
            return node
    return None


class _Walk:
    def __init__(self, config: dict[str, Any]) -> None:
        self.vars: dict[str, Any] = {"hf_config": config}
        self.count_key: str | None = None
        self.line = 0
        self.raises: str | None = None
        self.done = False

    # -- expressions --------------------------------------------------------------------------
    def value(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = [self.value(e) for e in node.elts]
            return UNKNOWN if any(i is UNKNOWN for i in items) else (set(items) if isinstance(node, ast.Set) else items)
        if isinstance(node, ast.Dict):
            return {self.value(k): self.value(v) for k, v in zip(node.keys, node.values) if k is not None}
        if isinstance(node, ast.Name):
            return self.vars.get(node.id, UNKNOWN)
        if isinstance(node, ast.NamedExpr):
            v = self.value(node.value)
            self.vars[node.target.id] = v
            return v
        if isinstance(node, ast.Attribute):
            base = self.value(node.value)
            return base.get(node.attr, UNKNOWN if node.attr not in ("architectures",) else []) if isinstance(base, dict) else UNKNOWN
        if isinstance(node, ast.Subscript):
            base, key = self.value(node.value), self.value(node.slice)
            if isinstance(base, (list, tuple)) and isinstance(key, int):
                return base[key] if -len(base) <= key < len(base) else UNKNOWN
            return base.get(key, UNKNOWN) if isinstance(base, dict) and isinstance(key, str) else UNKNOWN
        if isinstance(node, ast.Compare):
            return self.compare(node)
        if isinstance(node, ast.BoolOp):
            vals = [self.value(v) for v in node.values]
            if isinstance(node.op, ast.And):
                if any(v is not UNKNOWN and not v for v in vals):
                    return False
                return UNKNOWN if any(v is UNKNOWN for v in vals) else vals[-1]
            for v in vals:
                if v is not UNKNOWN and v:
                    return v
            return UNKNOWN if any(v is UNKNOWN for v in vals) else vals[-1]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            v = self.value(node.operand)
            return UNKNOWN if v is UNKNOWN else not v
        if isinstance(node, ast.IfExp):
            t = self.value(node.test)
            return UNKNOWN if t is UNKNOWN else self.value(node.body if t else node.orelse)
        if isinstance(node, ast.Call):
            return self.call(node)
        return UNKNOWN

    def call(self, node: ast.Call) -> Any:
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        args = node.args
        if name in ("getattr", "hasattr") and len(args) >= 2:
            obj, key = self.value(args[0]), self.value(args[1])
            if not isinstance(obj, dict) or not isinstance(key, str):
                return UNKNOWN
            if name == "hasattr":
                return key in obj
            return obj.get(key, self.value(args[2]) if len(args) > 2 else UNKNOWN)
        if name in ("get_hf_text_config", "get_text_config"):
            obj = self.value(args[0]) if args else self.value(f.value) if isinstance(f, ast.Attribute) else UNKNOWN
            if isinstance(obj, dict):
                text = obj.get("text_config")
                return text if isinstance(text, dict) else obj
            return UNKNOWN
        if name == "deepcopy" and args:
            v = self.value(args[0])
            return copy.deepcopy(v) if v is not UNKNOWN else UNKNOWN
        if name == "get" and isinstance(f, ast.Attribute):
            obj = self.value(f.value)
            if isinstance(obj, dict) and args:
                key = self.value(args[0])
                return obj.get(key, self.value(args[1]) if len(args) > 1 else None) if isinstance(key, str) else UNKNOWN
        if name == "int" and args:
            v = self.value(args[0])
            return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else UNKNOWN
        return UNKNOWN

    def compare(self, node: ast.Compare) -> Any:
        left = self.value(node.left)
        for op, right_node in zip(node.ops, node.comparators):
            right = self.value(right_node)
            if left is UNKNOWN or right is UNKNOWN:
                return UNKNOWN
            if isinstance(op, (ast.Is, ast.IsNot)) and not (right is None or isinstance(right, bool)):
                return UNKNOWN
            try:
                if isinstance(op, ast.Eq):
                    ok = left == right
                elif isinstance(op, ast.NotEq):
                    ok = left != right
                elif isinstance(op, ast.In):
                    ok = left in right
                elif isinstance(op, ast.NotIn):
                    ok = left not in right
                elif isinstance(op, ast.Is):
                    ok = left is right
                elif isinstance(op, ast.IsNot):
                    ok = left is not right
                elif isinstance(op, ast.Gt):
                    ok = left > right
                elif isinstance(op, ast.GtE):
                    ok = left >= right
                elif isinstance(op, ast.Lt):
                    ok = left < right
                elif isinstance(op, ast.LtE):
                    ok = left <= right
                else:
                    return UNKNOWN
            except TypeError:
                return UNKNOWN
            if not ok:
                return False
            left = right
        return True

    # -- statements ---------------------------------------------------------------------------
    def run(self, body: list[ast.stmt]) -> None:
        for st in body:
            if self.done:
                return
            self.stmt(st)

    def stmt(self, st: ast.stmt) -> None:
        if isinstance(st, ast.If):
            t = self.value(st.test)
            if t is not UNKNOWN and t:
                if self._mentions_config(st.test):
                    self.line = st.lineno
                self.run(st.body)
            elif t is not UNKNOWN or not st.orelse:
                self.run(st.orelse if t is not UNKNOWN else [])
            return
        if isinstance(st, ast.Assign):
            v = self.value(st.value)
            key = self._count_key(st.value) if isinstance(st.value, ast.Call) else None
            if key and any(isinstance(t, ast.Name) and t.id == "n_predict" for t in st.targets):
                self.count_key = key
            for target in st.targets:
                self.assign(target, v)
            return
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
            f = st.value.func
            if isinstance(f, ast.Attribute) and f.attr == "update" and st.value.args:
                obj, new = self.value(f.value), self.value(st.value.args[0])
                if isinstance(obj, dict) and isinstance(new, dict):
                    obj.update(new)
            return
        if isinstance(st, ast.Raise):
            self.raises = _raise_text(st)
            self.done = True
            return
        if isinstance(st, ast.Return):
            self.done = True

    def assign(self, target: ast.expr, v: Any) -> None:
        if isinstance(target, ast.Name):
            self.vars[target.id] = v
        elif isinstance(target, ast.Attribute):
            obj = self.value(target.value)
            if isinstance(obj, dict):
                obj[target.attr] = v

    @staticmethod
    def _count_key(call: ast.Call) -> str | None:
        if isinstance(call.func, ast.Name) and call.func.id == "getattr" and len(call.args) >= 2:
            key = call.args[1]
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                return key.value
        return None

    @staticmethod
    def _mentions_config(test: ast.expr) -> bool:
        return any(isinstance(n, ast.Attribute) and n.attr in ("model_type", "architectures") for n in ast.walk(test)) or any(
            isinstance(n, ast.Name) and n.id in ("initial_architecture", "arch", "architectures") for n in ast.walk(test))


def _raise_text(st: ast.Raise) -> str:
    exc = st.exc
    if isinstance(exc, ast.Call) and exc.args:
        parts = [c.value for c in ast.walk(exc.args[0]) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
        return "".join(parts).strip() or "raises"
    return "raises"


def resolve(source: str, target_config: dict[str, Any]) -> MtpResolution | None:
    """vLLM's MTP draft for ``target_config`` (None when ``source`` has no ``hf_config_override``)."""
    fn = _function(source)
    if fn is None:
        return None
    cfg = copy.deepcopy(target_config)
    walk = _Walk(cfg)
    archs = cfg.get("architectures") or []
    walk.vars["initial_architecture"] = archs[0] if archs else UNKNOWN
    walk.run(fn.body)
    final = walk.vars.get("hf_config")
    final = final if isinstance(final, dict) else cfg
    n = final.get("n_predict", walk.vars.get("n_predict"))
    if n is None or n is UNKNOWN:
        n = walk.vars.get("n_predict")
    n_predict = n if isinstance(n, int) and not isinstance(n, bool) else None
    arch_list = final.get("architectures")
    arch = arch_list[0] if isinstance(arch_list, list) and arch_list and isinstance(arch_list[0], str) else None
    mt = final.get("model_type")
    return MtpResolution(
        model_type=mt if isinstance(mt, str) else None, architecture=arch, n_predict=n_predict,
        count_key=walk.count_key if n_predict is not None or walk.count_key else None, line=walk.line,
        raises=walk.raises, mtp_types=mtp_model_types(source),
    )
