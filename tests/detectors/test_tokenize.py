"""Pseudo-tokenizer: words, punctuation, single CJK characters."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from detectors.blocks import _DETECT_ASCII, _DETECT_RE
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


@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=400))
def test_the_ascii_block_pattern_finds_the_same_tokens(text: str) -> None:
    """On ASCII text the blocks' plain-class pattern finds exactly the tokens (and line
    breaks with their indentation) of the general one."""
    assert _DETECT_ASCII.findall(text) == _DETECT_RE.findall(text)
    every = "".join(map(chr, range(128)))
    assert _DETECT_ASCII.findall(every + text + every) == _DETECT_RE.findall(
        every + text + every)
