"""The per-choice bookkeeping of a watched attempt (``sidecar.watch``)."""

from __future__ import annotations

from detectors import DetectorConfig, default_chain
from sidecar.watch import MAX_KEPT_REASONING, ChoiceState


def _state() -> ChoiceState:
    return ChoiceState(default_chain(DetectorConfig()))


def test_kept_reasoning_is_the_deltas_in_order_in_few_strings() -> None:
    """Token-sized deltas come back joined and in order, held in a handful of strings."""
    state = _state()
    pieces = [f" w{i}" for i in range(1000)]
    for piece in pieces:
        state.keep_reasoning(piece)
    assert state.reasoning_text() == "".join(pieces)
    assert state.reasoning_chars == len("".join(pieces))
    assert len(state.reasoning) < 64


def test_kept_reasoning_stops_at_the_cap() -> None:
    """Past ``MAX_KEPT_REASONING`` characters nothing more is kept (at most one delta over)."""
    state = _state()
    for _ in range(MAX_KEPT_REASONING // 4 + 500):
        state.keep_reasoning("abcd")
    text = state.reasoning_text()
    assert MAX_KEPT_REASONING <= len(text) < MAX_KEPT_REASONING + 4
    assert text == "abcd" * (len(text) // 4)
