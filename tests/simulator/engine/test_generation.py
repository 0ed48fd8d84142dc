"""The simulated engine: special tokens, budgets, limits, repetition detection, choices."""

from __future__ import annotations

import itertools

from sidecar.simulator.engine.behaviours import LOOP_TOKENS
from sidecar.simulator.engine.generation import (
    Channel,
    GenSpec,
    Mode,
    RepetitionParams,
    Script,
    generate,
    interleave,
)


def _script(reasoning: list[str], answer: list[str], *, closes: bool = True) -> Script:
    return Script(
        reasoning=lambda: iter(reasoning),
        after_thinking=lambda: iter(answer),
        direct=lambda: iter(answer),
        reasoning_closes=closes,
    )


def test_generate_counts_specials_but_hides_them() -> None:
    """<think>, </think> and EOS count as completion tokens with no visible text."""
    tokens = list(generate(_script(["a", "b"], ["c"]), GenSpec(100, Mode.THINK)))
    assert [(t.text, t.channel) for t in tokens] == [
        ("", Channel.SPECIAL),
        ("a", Channel.REASONING),
        ("b", Channel.REASONING),
        ("", Channel.SPECIAL),
        ("c", Channel.CONTENT),
        ("", Channel.SPECIAL),
    ]
    assert tokens[-1].finish_reason == "stop"
    assert tokens[-1].completion_tokens == 6
    assert tokens[-1].reasoning_tokens == 2


def test_budget_zero_closes_thinking_at_once() -> None:
    """A budget of 0 forces </think> right after <think>."""
    script = _script(["a"] * 10, ["x"])
    tokens = list(generate(script, GenSpec(100, Mode.THINK, thinking_budget=0)))
    assert [t.channel for t in tokens[:3]] == [Channel.SPECIAL, Channel.SPECIAL, Channel.CONTENT]
    assert tokens[-1].reasoning_tokens == 0


def test_trace_cut_inside_think_ends_with_length() -> None:
    """A trace whose thinking never closed ends on its last token with length."""
    tokens = list(generate(_script(["a", "b"], [], closes=False), GenSpec(100, Mode.THINK)))
    assert tokens[-1].text == "b"
    assert tokens[-1].finish_reason == "length"


def test_repetition_detection_needs_min_count_runs() -> None:
    """Detection fires when the pattern has repeated min_count times back to back."""
    loop = list(LOOP_TOKENS)
    script = Script(lambda: itertools.cycle(loop), lambda: iter(()), lambda: iter(()))
    spec = GenSpec(1000, Mode.THINK, repetition=RepetitionParams(64, 4, 3))
    tokens = list(generate(script, spec))
    assert len(tokens) == 1 + 3 * len(loop)
    assert tokens[-1].finish_reason == "repetition"
    assert tokens[-1].stop_reason == "repetition_detected"


def test_continue_mode_routes_to_reasoning() -> None:
    """CONTINUE: the answer arrives in the reasoning channel (vLLM 0.32's parser state)."""
    tokens = list(generate(_script([], ["ok"]), GenSpec(10, Mode.CONTINUE)))
    assert [(t.text, t.channel) for t in tokens] == [
        ("ok", Channel.REASONING),
        ("", Channel.SPECIAL),
    ]


def test_interleave_matches_captured_n2_order() -> None:
    """Choice 1 runs one engine step behind choice 0, as in chat_n2.sse."""
    spec = GenSpec(3, Mode.NO_THINK)
    script = _script([], ["a", "b", "c", "d"])
    steps = list(interleave([generate(script, spec), generate(script, spec)]))
    order = [index for step in steps for index, _ in step]
    assert order == [0, 0, 1, 0, 1, 1]
