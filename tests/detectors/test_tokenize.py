"""Pseudo-tokenizer: words, punctuation, single CJK characters."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import detectors.blocktokens
from detectors.blocks import _DETECT_RE
from detectors.blocktokens import MAX_INDENT, ascii_tokens
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
@example("\n" + " " * (MAX_INDENT + 6) + "x\n\t \t")
@example("a\n" + "\t" * MAX_INDENT + "b\n" + " " * (MAX_INDENT - 1) + "\n")
@example("\x1c\x1d\x1e\x1f\x0b\x0c\r\x00\x7f_a1 b")
def test_ascii_tokens_are_the_general_patterns_tokens(text: str) -> None:
    """On ASCII text, ``ascii_tokens`` (C in the compiled build, a plain-class regex in
    the source) finds exactly the tokens, and line breaks with their indentation, of the
    general pattern."""
    assert ascii_tokens(text) == _DETECT_RE.findall(text)
    every = "".join(map(chr, range(128)))
    assert ascii_tokens(every + text + every) == _DETECT_RE.findall(every + text + every)


@pytest.mark.skipif(not str(detectors.blocktokens.__file__).endswith(".so"),
                    reason="the source's regex takes any str: only the C build refuses")
def test_the_c_tokenizer_refuses_what_is_not_ascii_text() -> None:
    """The C build refuses text that is not ASCII, or not a str, instead of misreading it."""
    with pytest.raises(ValueError, match="ASCII"):
        ascii_tokens("café")
    with pytest.raises(TypeError):
        ascii_tokens(b"abc")  # type: ignore[arg-type]
