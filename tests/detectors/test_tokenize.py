"""Pseudo-tokenizer: words, punctuation, single CJK characters."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from detectors.tokenize import split_deltas, tokens


def test_words_punctuation_and_cjk_are_tokens() -> None:
    """Words and numbers stay whole, punctuation and each CJK character stand alone."""
    assert tokens("Hmm, CH3 is 12.5!") == ["Hmm", ",", "CH3", "is", "12", ".", "5", "!"]
    assert tokens("日本語。한국어") == ["日", "本", "語", "。", "한", "국", "어"]


def test_deltas_carry_leading_whitespace() -> None:
    """Whitespace belongs to the following token, as in BPE streams."""
    assert split_deltas("a  b\n\nc") == ["a", "  b", "\n\nc"]


@given(st.text())
def test_deltas_concatenate_back(text: str) -> None:
    """Splitting into deltas never loses or reorders a character."""
    assert "".join(split_deltas(text)) == text
