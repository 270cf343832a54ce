"""What one engine version accepts from a drafter, in engine-neutral words.

Each adapter fills an :class:`EngineRules` from the engine's installed source on the host when it
can (the supported drafter classes, the EAGLE-3 target rule, the method-from-path rule, the default
aux layer ids and how an id maps onto a layer) and from its own table otherwise; ``source`` says
which, so every finding can show where its rule came from.
"""

from __future__ import annotations

import ast
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

#: Reads one file of the installed engine package, relative to the folder holding it
#: (``vllm/config/speculative.py``); None when it is not there.
SourceReader = Callable[[str], Awaitable[str | None]]


@dataclass(frozen=True)
class RulesQuery:
    """What the adapter is asked about: this engine version, this target, this drafter class."""

    version: str | None
    target_arch: str | None
    target_model_type: str | None
    drafter_arch: str | None
    method: str = "eagle3"
    #: The target's whole config.json (the MTP rewrite reads it), and the drafter's.
    target_config: dict[str, Any] = field(default_factory=dict)
    drafter_config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PathRule:
    """The engine switches to ``method`` when the drafter's path contains ``needle`` (case-insensitive)."""

    needle: str
    method: str


@dataclass(frozen=True)
class MtpRule:
    """What the engine builds as the MTP draft of this target, read from its own config rewrite."""

    #: The engine maps the target to an MTP model it accepts.
    supported: bool
    model_type: str | None
    architecture: str | None
    #: MTP layers the engine takes from the target's config (None: the config has no such key).
    n_predict: int | None
    count_key: str | None
    evidence: str
    #: The engine refuses num_tokens > n_predict unless divisible by it; and warns when it reuses one layer.
    tokens_divisible: bool = False
    reuse_warning: bool = False


@dataclass(frozen=True)
class EngineRules:
    """One engine version's drafter rules. ``None`` in a field means "not known": no finding from it."""

    engine: str
    version: str | None
    source: str
    #: Drafter classes the engine's speculative registry accepts.
    drafter_architectures: frozenset[str] | None = None
    #: servelab method -> the prefix the engine puts before a drafter class (vLLM: eagle3 -> Eagle3).
    arch_prefix: dict[str, str] = field(default_factory=dict)
    #: EAGLE-3 target rule: does the target's class take aux hidden states (None: unknown).
    eagle3_target_ok: bool | None = None
    eagle3_target_evidence: str = ""
    #: Older engines: substrings of the target's text model type that EAGLE-3 accepts (a whitelist).
    eagle3_target_types: tuple[str, ...] | None = None
    #: Methods the path rules never override, and the rules, in the engine's order.
    path_rule_exempt: frozenset[str] = frozenset()
    path_rules: tuple[PathRule, ...] = ()
    path_rule_evidence: str = ""
    #: The default aux ids as the engine's expression in ``num_layers``: ("2", "num_layers // 2", ...).
    default_aux: tuple[str, ...] | None = None
    #: What the engine adds to explicit ids / to its defaults before tapping (SGLang: +1 / 0).
    explicit_offset: int = 0
    default_offset: int = 0
    #: A tap index c is the input of layer c (the output of layer c-1; 0 is the embeddings).
    #: The largest tap index: N when the engine also taps after the last layer, else N-1.
    taps_after_last_layer: bool = True
    #: The engine keeps each tap once (vLLM: ``sorted(set(ids))``).
    dedups_taps: bool = False
    convention_evidence: str = ""
    #: Methods for which the engine raises the drafter's max positions to the target's.
    raises_draft_positions: frozenset[str] = frozenset()
    #: Config flags the engine's drafter module reads (None: unknown); ``reader`` names that module.
    read_flags: frozenset[str] | None = None
    flags_reader: str = ""
    #: Engine files these rules were read from (relative to the package root's parent).
    files: tuple[str, ...] = ()
    #: The MTP draft of this target (None: not asked, or the engine's rewrite is not readable).
    mtp: MtpRule | None = None
    #: Speculators-format drafters: the layer config's model_type -> the class the engine builds
    #: (None: the engine does not read the speculators format, or its reader is not readable).
    speculators_archs: dict[str, str] | None = None
    speculators_evidence: str = ""

    def drafter_class(self, arch: str, method: str) -> str:
        """The class name the engine will look up for ``arch`` under ``method``."""
        prefix = self.arch_prefix.get(method)
        if not prefix or arch.startswith(prefix) or arch.endswith(prefix):
            return arch
        return prefix + arch

    def defaults(self, num_layers: int) -> tuple[int, ...] | None:
        if self.default_aux is None:
            return None
        return tuple(eval_layer_expr(e, num_layers) for e in self.default_aux)

    def taps(self, ids: tuple[int, ...], explicit: bool) -> tuple[int, ...]:
        """The tap indices the engine uses for ``ids``, in its order (deduplicated when it does)."""
        off = self.explicit_offset if explicit else self.default_offset
        out = tuple(i + off for i in ids)
        return tuple(sorted(set(out))) if self.dedups_taps else out

    def max_tap(self, num_layers: int) -> int:
        return num_layers if self.taps_after_last_layer else num_layers - 1


def eval_layer_expr(expr: str, num_layers: int) -> int:
    """Evaluate an engine's default-id expression (ints, ``num_layers``, + - * //) without eval()."""

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name) and node.id in ("num_layers", "N"):
            return num_layers
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add):
                return a + b
            if isinstance(node.op, ast.Sub):
                return a - b
            if isinstance(node.op, ast.Mult):
                return a * b
            if isinstance(node.op, ast.FloorDiv) and b:
                return a // b
        raise ValueError(f"unsupported layer expression {expr!r}")

    return ev(ast.parse(expr.strip(), mode="eval"))
