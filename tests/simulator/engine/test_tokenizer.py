"""The pseudo-tokenizer and the chat template of the simulated model."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sidecar.simulator.engine.tokenizer import (
    render_chat,
    think_state_of_prompt,
    token_id,
    tokenize,
)


@given(st.text())
def test_tokenize_round_trips(text: str) -> None:
    """Joining the tokens gives the text back, whatever the text."""
    tokens = tokenize(text)
    assert "".join(tokens) == text
    assert all(tokens)


def test_tokenize_shapes() -> None:
    """Words keep their leading space; punctuation, digits and Hangul are single tokens."""
    assert tokenize(" re-check 42, 잠깐") == [" re", "-", "check", " 4", "2", ",", " 잠", "깐"]
    assert tokenize("<think>\n\n</think>") == ["<think>", "\n\n", "</think>"]


def test_capture_prompt_counts() -> None:
    """The captures' prompt is 9 tokens; thinking off adds the 4-token empty think block."""
    msgs = [{"role": "user", "content": "Hello"}]
    on = render_chat(msgs, add_generation_prompt=True, continue_final_message=False, thinking=True)
    off = render_chat(
        msgs, add_generation_prompt=True, continue_final_message=False, thinking=False
    )
    assert len(tokenize(on)) == 9
    assert len(tokenize(off)) == 13


def test_token_ids_are_stable_and_specials_distinct() -> None:
    """Token ids do not depend on the process; special tokens get reserved ids."""
    assert token_id(" Hmm") == token_id(" Hmm")
    assert token_id("<think>") != token_id("</think>")
    assert token_id("<think>") >= 151_643


def test_think_state_of_prompt() -> None:
    """The newest think tag decides where a raw prompt leaves the model."""
    assert think_state_of_prompt("a<think>b") == "open"
    assert think_state_of_prompt("<think>b</think>c") == "closed"
    assert think_state_of_prompt("plain") == "none"
