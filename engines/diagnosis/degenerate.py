"""Repetitive output inflates acceptance (a loop is easy to draft), so spot it before praising.

The measure is the share of distinct token bigrams among all token bigrams of an output,
averaged over a group's outputs. Tokens come from the server's own tokenizer (``/tokenize`` on
vLLM), so the unit is what the drafter predicts. In natural text nearly every token bigram is
new (> 0.8); a model stuck in a loop falls well below half. A server without ``/tokenize``
falls back to character 8-grams (natural text > 0.9, loops low; words would miss the long runs
without spaces that a broken model emits). Too-short outputs say nothing and are skipped.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

#: Below this share of distinct bigrams the output counts as degenerate.
DEGENERATE_BELOW = 0.5
#: Outputs with fewer tokens than this are not judged.
MIN_TOKENS = 8
#: The character fallback: window length, and the shortest text judged.
CHAR_N = 8
MIN_CHARS = 32


def distinct_share(units: Sequence[Hashable], n: int = 2) -> float | None:
    """Distinct n-grams / n-grams of one sequence; None when too short to judge."""
    if len(units) < max(n + 1, MIN_TOKENS if n == 2 else MIN_CHARS):
        return None
    grams = [tuple(units[i : i + n]) for i in range(len(units) - n + 1)]
    return len(set(grams)) / len(grams)


def unique_bigram_share(tokens: Iterable[Sequence[int]]) -> float | None:
    """Mean over outputs (as token ids) of distinct bigrams / bigrams; None when none is long enough."""
    shares = [s for s in (distinct_share(t) for t in tokens) if s is not None]
    return sum(shares) / len(shares) if shares else None


def unique_char_share(texts: Iterable[str]) -> float | None:
    """The fallback without a tokenizer: mean share of distinct character 8-grams."""
    shares = [s for s in (distinct_share(t, CHAR_N) for t in texts) if s is not None]
    return sum(shares) / len(shares) if shares else None


def is_degenerate(share: float | None) -> bool:
    return share is not None and share < DEGENERATE_BELOW
