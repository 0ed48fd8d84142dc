"""``Chain.think`` is ``Chain.feed`` on the thinking channel: the same verdicts, at the
same token and character, and the same state after every delta, whatever the budgets."""

from __future__ import annotations

from typing import Any

from detector_helpers import load
from hypothesis import given, settings
from hypothesis import strategies as st

from detectors import Chain, DetectorConfig, default_chain
from detectors.replay import split_stream
from detectors.tokenize import split_deltas

_LOOP = split_deltas(load("loops")[34]["text"])[:2500]
_HEALTHY = split_deltas(load("healthy")[44]["text"])[:2500]

CONFIGS = {
    "default": DetectorConfig(),
    "token budget": DetectorConfig(thinking_token_budget=700),
    "seconds budget": DetectorConfig(thinking_seconds_budget=9.5),
    "no text detectors": DetectorConfig(
        degeneration_enabled=False, periodic_enabled=False, restatement_enabled=False,
        recurrence_enabled=False),
}


def _state(chain: Chain) -> tuple[Any, ...]:
    return (chain.verdict, chain.thinking_tokens, chain.content_tokens, chain.chars)


def _run(deltas: list[tuple[str, str, int, float]], config: DetectorConfig
         ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Feed ``deltas`` to two chains, thinking through ``think`` on one and ``feed`` on
    the other; the verdict each delta returned and the state after it, per chain."""
    fast, plain = default_chain(config), default_chain(config)
    seen_fast, seen_plain = [], []
    for channel, text, tokens, now in deltas:
        if channel == "thinking":
            got = fast.think(text, tokens, now)
        else:
            got = fast.feed(channel, text, tokens, now)
        want = plain.feed(channel, text, tokens, now)
        seen_fast.append((got, *_state(fast)))
        seen_plain.append((want, *_state(plain)))
    # The clock-driven detectors see the same chain: stall and the wall-clock budget.
    seen_fast.append((fast.tick(deltas[-1][3] + 300.0),))
    seen_plain.append((plain.tick(deltas[-1][3] + 300.0),))
    return seen_fast, seen_plain


def test_think_is_feed_on_a_loop_and_a_healthy_trace() -> None:
    """Every delta of a loop (which fires) and of a healthy trace, under every config."""
    for config in CONFIGS.values():
        for pieces in (_LOOP, _HEALTHY):
            deltas = [("thinking", p, 1, i * 0.01) for i, p in enumerate(pieces)]
            fast, plain = _run(deltas, config)
            assert fast == plain
    fired = _run([("thinking", p, 1, i * 0.01) for i, p in enumerate(_LOOP)],
                 CONFIGS["default"])[0]
    assert any(step[0] is not None for step in fired)  # the loop really fires


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(CONFIGS)),
       st.lists(st.tuples(st.sampled_from(["thinking", "thinking", "thinking", "content"]),
                          st.integers(1, 400), st.integers(0, 3), st.floats(0, 0.5)),
                min_size=1, max_size=120))
def test_think_is_feed_on_any_mix(name: str, steps: list[tuple[str, int, int, float]]) -> None:
    """Random deltas of a healthy trace (long and short ones, several tokens or none, the
    clock jumping), thinking and answer mixed: both chains agree at every step."""
    start, end, _ = split_stream(load("healthy")[44]["text"])
    text = load("healthy")[44]["text"][start:end]
    deltas, pos, now = [], 0, 0.0
    for channel, size, tokens, step in steps:
        piece = text[pos : pos + size] or "x"
        pos += size
        now += step
        deltas.append((channel, piece, tokens, now))
    fast, plain = _run(deltas, CONFIGS[name])
    assert fast == plain
