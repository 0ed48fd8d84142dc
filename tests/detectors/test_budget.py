"""Budgets, stall and the thinking-budget precedence, with synthetic time."""

from __future__ import annotations

import pytest

from detectors import DetectorConfig, default_chain, resolve_thinking_budget


def test_precedence_header_body_model_server() -> None:
    """The highest level that sets a limit wins: header > body > model > server."""
    assert resolve_thinking_budget(100, 200, 300, "400") == 400
    assert resolve_thinking_budget(100, 200, 300, None) == 300
    assert resolve_thinking_budget(100, 200, None, None) == 200
    assert resolve_thinking_budget(100, None, None, None) == 100
    assert resolve_thinking_budget(None, None, None, None) is None


def test_minus_one_falls_through() -> None:
    """-1 at a level means no limit there, so the next level decides."""
    assert resolve_thinking_budget(100, None, -1, "-1") == 100
    assert resolve_thinking_budget(-1, -1, -1, -1) is None


@pytest.mark.parametrize(
    ("body", "header"), [(True, None), (None, False), ("abc", None), (None, "1.5"), (-2, None)]
)
def test_bad_values_are_rejected(body: object, header: object) -> None:
    """Booleans, non-integers and values below -1 raise ValueError."""
    with pytest.raises(ValueError, match=r"budget|integer|-1"):
        resolve_thinking_budget(None, None, body, header)


def test_token_budget_fires_when_reached() -> None:
    """The thinking delta that reaches the budget gets the verdict; nothing after it."""
    chain = default_chain(DetectorConfig(thinking_token_budget=10))
    verdicts = [chain.feed("thinking", " x", 2, i) for i in range(5)]
    assert verdicts[:4] == [None] * 4
    last = verdicts[4]
    assert last is not None
    assert (last.detector, last.at_token) == ("thinking_token_budget", 10)
    assert chain.thinking_tokens == 10
    assert chain.feed("thinking", " y", 1, 6) is None
    assert chain.verdict is last


def test_token_budget_ignores_content() -> None:
    """Content tokens never count against the thinking budget."""
    chain = default_chain(DetectorConfig(thinking_token_budget=3))
    assert chain.feed("thinking", "a", 1, 0) is None
    for i in range(10):
        assert chain.feed("content", f" w{i}", 1, i) is None
    assert (chain.thinking_tokens, chain.content_tokens) == (1, 10)


def test_seconds_budget_counts_from_started_at() -> None:
    """The wall-clock budget fires on feed or tick once thinking passes it."""
    chain = default_chain(DetectorConfig(thinking_seconds_budget=5.0), started_at=100.0)
    assert chain.feed("thinking", "a", 1, 101.0) is None
    assert chain.tick(104.9) is None
    verdict = chain.tick(105.0)
    assert verdict is not None
    assert verdict.detector == "thinking_seconds_budget"
    assert chain.tick(200.0) is None


def test_seconds_budget_fires_on_the_thinking_delta_that_reaches_it() -> None:
    """Between ticks, the first thinking delta at or past the deadline fires it, with
    that delta counted; one before the deadline does not."""
    chain = default_chain(DetectorConfig(thinking_seconds_budget=5.0, stall_seconds=None),
                          started_at=100.0)
    assert chain.feed("thinking", "a", 1, 104.99) is None
    verdict = chain.feed("thinking", "bc", 1, 105.0)
    assert verdict is not None
    assert (verdict.detector, verdict.at_token, verdict.at_char) == (
        "thinking_seconds_budget", 2, 3)


def test_budgets_do_not_fire_on_thinking_after_the_answer_began() -> None:
    """Thinking that comes back after content (an inline ``<think>`` in the answer) is
    not held to the thinking budgets: they cover the thinking phase only."""
    chain = default_chain(DetectorConfig(thinking_token_budget=3, thinking_seconds_budget=5.0,
                                         stall_seconds=None))
    assert chain.feed("thinking", "a", 1, 1.0) is None
    assert chain.feed("content", "b", 1, 2.0) is None
    for i in range(10):
        assert chain.feed("thinking", f" w{i}", 1, 50.0 + i) is None
    assert chain.thinking_tokens == 11


def test_seconds_budget_stops_when_content_starts() -> None:
    """Once the answer streams, the thinking budget no longer applies."""
    chain = default_chain(DetectorConfig(thinking_seconds_budget=5.0, stall_seconds=None))
    chain.feed("thinking", "a", 1, 1.0)
    chain.feed("content", "b", 1, 2.0)
    assert chain.feed("content", "c", 1, 50.0) is None
    assert chain.tick(60.0) is None


def test_stall_fires_after_silence() -> None:
    """No delta for stall_seconds fires the stall detector on the last channel."""
    chain = default_chain(DetectorConfig(stall_seconds=10.0), started_at=0.0)
    chain.feed("content", "a", 1, 3.0)
    assert chain.tick(12.9) is None
    verdict = chain.tick(13.0)
    assert verdict is not None
    assert (verdict.detector, verdict.channel) == ("stall", "content")


def test_stall_counts_from_start_without_tokens() -> None:
    """A stream that never produces a token stalls too."""
    chain = default_chain(DetectorConfig(stall_seconds=2.0), started_at=10.0)
    assert chain.tick(11.0) is None
    verdict = chain.tick(12.5)
    assert verdict is not None
    assert verdict.detector == "stall"


def test_stall_off() -> None:
    """stall_seconds=None switches the stall detector off."""
    chain = default_chain(DetectorConfig(stall_seconds=None))
    assert chain.tick(1e9) is None
