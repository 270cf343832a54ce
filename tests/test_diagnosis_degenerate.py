"""Looping output is spotted by its share of unique bigrams; natural text is not."""

from __future__ import annotations

from engines.diagnosis.degenerate import is_degenerate, unique_bigram_share


def test_a_loop_is_degenerate_and_prose_is_not() -> None:
    loop = "the cat the cat the cat the cat the cat the cat the cat the cat"
    prose = "Speculative decoding lets a small draft model propose several tokens that the large model then checks"
    assert is_degenerate(unique_bigram_share([loop]))
    assert not is_degenerate(unique_bigram_share([prose]))
    assert unique_bigram_share([prose]) == 1.0


def test_text_without_spaces_is_judged_by_characters() -> None:
    assert is_degenerate(unique_bigram_share(["abababababababababababababababab"]))


def test_too_short_says_nothing() -> None:
    assert unique_bigram_share(["hi there", ""]) is None
    assert not is_degenerate(None)
