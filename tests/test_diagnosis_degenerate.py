"""Looping output is spotted by its share of distinct token bigrams; natural text is not."""

from __future__ import annotations

from servelab.engines.diagnosis.degenerate import distinct_share, is_degenerate, unique_bigram_share, unique_char_share


def test_a_token_loop_is_degenerate_and_varied_tokens_are_not() -> None:
    loop = [11, 12] * 16
    varied = list(range(100, 132))
    assert is_degenerate(unique_bigram_share([loop]))
    assert unique_bigram_share([varied]) == 1.0
    # a loop with a varied tail: what n-gram drafting feeds on
    mixed = [7, 3, 9] + [11, 12, 13] * 8 + [40, 41, 42]
    share = unique_bigram_share([mixed])
    assert share is not None and is_degenerate(share)


def test_the_share_is_the_mean_over_outputs() -> None:
    a, b = [1, 2] * 10, list(range(20))
    sa, sb = distinct_share(a), distinct_share(b)
    assert sa is not None and sb is not None
    assert unique_bigram_share([a, b]) == (sa + sb) / 2


def test_character_fallback_for_a_server_without_a_tokenizer() -> None:
    prose = "Speculative decoding lets a small draft model propose several tokens that the large model then checks"
    share = unique_char_share([prose])
    assert share is not None and share > 0.95
    assert is_degenerate(unique_char_share(["\x01\ufffdRO" + "\x14es" * 20]))


def test_too_short_says_nothing() -> None:
    assert unique_bigram_share([[1, 2, 3], []]) is None
    assert unique_char_share(["hi there"]) is None
    assert not is_degenerate(None)
