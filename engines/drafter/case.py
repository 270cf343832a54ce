"""One drafter check's question: which drafter, for which target, under which method, length and depth."""

from __future__ import annotations

from dataclasses import dataclass

from servelab.engines.drafter.facts import ModelFacts


@dataclass(frozen=True)
class DrafterCase:
    """Everything one check needs: which drafter, for which target, under which method and length."""

    drafter: ModelFacts
    target: ModelFacts
    method: str
    draft_path: str
    max_model_len: int | None = None
    #: Engine files the experiment's patch set changes: a rule read from one of them is provisional.
    patched_files: frozenset[str] = frozenset()
    #: Tokens drafted per step (vLLM's num_speculative_tokens), when the caller knows it.
    num_tokens: int | None = None
