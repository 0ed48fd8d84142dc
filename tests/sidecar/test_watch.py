"""The per-choice bookkeeping of a watched attempt (``sidecar.watch``)."""

from __future__ import annotations

import orjson

from detectors import DetectorConfig, default_chain
from sidecar.watch import MAX_KEPT_REASONING, Attempt, ChoiceState


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


def _reasoning_stream(pieces: list[str]) -> bytes:
    chunks = [
        b"data: " + orjson.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk",
                                  "created": 1, "model": "m", "choices": [{
                                      "index": 0, "delta": {"reasoning": piece},
                                      "finish_reason": None}]}) + b"\n\n"
        for piece in pieces
    ]
    return b"".join(chunks)


def test_attempt_keeps_reasoning_only_when_asked() -> None:
    """An attempt made with ``keep_reasoning=False`` (no salvage step in the ladder) counts
    and watches the reasoning but keeps none of it; the default keeps it for salvage."""
    pieces = [f" step{i}" for i in range(300)]
    stream = _reasoning_stream(pieces)
    kept = Attempt(route="chat", number=0, detectors=DetectorConfig(), started_at=0.0)
    dropped = Attempt(route="chat", number=0, detectors=DetectorConfig(), started_at=0.0,
                      keep_reasoning=False)
    for attempt in (kept, dropped):
        assert attempt.feed(stream, 1.0) == stream
        assert attempt.choices[0].thinking_tokens == len(pieces)
        assert attempt.verdict is None
    assert kept.reasoning_of(0) == "".join(pieces)
    assert dropped.reasoning_of(0) == ""
    assert dropped.choices[0].reasoning == []
