"""Repetitive output inflates acceptance (a loop is easy to draft), so spot it before praising.

The measure is the share of distinct word bigrams among all word bigrams of each output,
pooled over the outputs of a group. Natural text stays above ~0.8; a model stuck in a loop
falls well below half. Too-short outputs say nothing and are skipped.
"""

from __future__ import annotations

from collections.abc import Iterable

#: Below this pooled share of unique bigrams the output counts as degenerate.
DEGENERATE_BELOW = 0.5
#: Outputs with fewer words than this are not judged.
MIN_WORDS = 6


def _units(text: str) -> list[str]:
    words = text.split()
    # Byte-level nonsense can come out without spaces; fall back to characters then.
    return words if len(words) >= MIN_WORDS else (list(text) if len(text) >= 4 * MIN_WORDS else [])


def unique_bigram_share(texts: Iterable[str]) -> float | None:
    """Mean over outputs of distinct bigrams / bigrams; None when no output is long enough."""
    shares: list[float] = []
    for text in texts:
        units = _units(text)
        if len(units) < 2:
            continue
        grams = list(zip(units, units[1:], strict=False))
        shares.append(len(set(grams)) / len(grams))
    return sum(shares) / len(shares) if shares else None


def is_degenerate(share: float | None) -> bool:
    return share is not None and share < DEGENERATE_BELOW
