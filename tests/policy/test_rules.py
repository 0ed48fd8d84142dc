"""Thinking policy: rule matching, presets, precedence and adaptive budgets (pure)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from sidecar.apis.openai.api import CHAT
from sidecar.config import PolicyRule
from sidecar.policy.adaptive import AdaptiveBudgets
from sidecar.policy.rules import Policy, RequestView, header_thinking, rules_of

CODE = "My parser fails:\n```python\nx = items[0]\n```\nFix it."
TRACE = 'Traceback (most recent call last):\n  File "a.py", line 3, in <module>\nIndexError: x'
MATH = "Prove that the integral of 2x from 0 to 1 equals 1."


def view(text: str, *, model: str = "Qwen/Qwen3-32B", system: str = "",
         tools: bool = False, max_tokens: int | None = 4096,
         headers: dict[str, str] | None = None) -> tuple[RequestView, dict[str, Any]]:
    messages = [{"role": "system", "content": system}] if system else []
    body: dict[str, Any] = {"model": model,
                            "messages": [*messages, {"role": "user", "content": text}]}
    if tools:
        body["tools"] = [{"type": "function", "function": {"name": "f"}}]
    return RequestView.of(body, "chat", headers or {}, max_tokens), body


PRESETS = Policy(rules_of((), ("coding-no-think", "math-think")))


@pytest.mark.parametrize(("text", "tools", "rule", "thinking"), [
    (CODE, False, "coding-no-think", "off"),
    (TRACE, False, "coding-no-think", "off"),
    ("Refactor this module for me.", True, "coding-no-think", "off"),
    (MATH, False, "math-think", "on"),
    ("Write a haiku about rain.", False, None, None),
])
def test_presets(text: str, tools: bool, rule: str | None, thinking: str | None) -> None:
    """coding-no-think catches code blocks, stack traces and tools; math-think equations."""
    v, body = view(text, tools=tools)
    decision = PRESETS.decide(v, CHAT.client_thinking(body), None)
    assert (decision.rule, decision.thinking) == (rule, thinking)


def test_rule_conditions_and_order() -> None:
    """Every condition must hold; the first matching rule wins, before the presets."""
    rules = (
        PolicyRule(name="big-budget", model="qwen3", max_tokens_at_least=16000,
                   thinking_token_budget=8000),
        PolicyRule(name="harness", headers={"X-Client": "^bench"}, thinking="off",
                   mode="shadow"),
        PolicyRule(name="sys", system="terse", last_user="^Hi", thinking="off"),
    )
    policy = Policy(rules_of(rules, ("math-think",)))
    v, body = view(MATH, max_tokens=32000)
    assert policy.decide(v, CHAT.client_thinking(body), None).thinking_token_budget == 8000
    v, body = view(MATH, model="llama", max_tokens=32000)
    assert policy.decide(v, CHAT.client_thinking(body), None).rule == "math-think"
    v, body = view("x", headers={"x-client": "bench-7"})
    decision = policy.decide(v, CHAT.client_thinking(body), None)
    assert (decision.rule, decision.mode) == ("harness", "shadow")
    v, body = view("Hi there", system="Be terse.")
    assert policy.decide(v, CHAT.client_thinking(body), None).rule == "sys"
    v, body = view("Hello", system="Be terse.")
    assert policy.decide(v, CHAT.client_thinking(body), None).rule is None


def test_precedence_client_over_header_over_rule() -> None:
    """What the client set wins, then X-Thinking, then the rule, then the default."""
    v, body = view(CODE)
    assert PRESETS.decide(v, CHAT.client_thinking(body), None).source == "rule"
    decision = PRESETS.decide(v, CHAT.client_thinking(body), "on")
    assert (decision.source, decision.thinking) == ("header", "on")
    body["chat_template_kwargs"] = {"enable_thinking": True}
    decision = PRESETS.decide(v, CHAT.client_thinking(body), "off")
    assert (decision.source, decision.thinking) == ("client", "on")
    v, body = view("plain question")
    assert PRESETS.decide(v, CHAT.client_thinking(body), "auto").source == "default"


def test_header_parsing() -> None:
    """X-Thinking accepts on, off and auto only."""
    assert header_thinking(" OFF ") == "off"
    assert header_thinking(None) is None
    with pytest.raises(ValueError, match="X-Thinking"):
        header_thinking("maybe")


def test_adaptive_budget_converges() -> None:
    """On a stream of healthy lengths the budget settles at multiple x their p99."""
    rng = random.Random(7)
    budgets = AdaptiveBudgets(window=500, quantile=0.99, multiple=3.0, min_samples=20)
    assert budgets.budget("m") is None
    lengths = [int(rng.lognormvariate(7.0, 0.5)) for _ in range(2000)]
    history = []
    for n, length in enumerate(lengths, 1):
        budgets.observe("m", length)
        if n % 250 == 0:
            history.append(budgets.budget("m"))
    true_p99 = float(np.exp(7.0 + 0.5 * 2.3263))  # the lognormal's p99
    final = budgets.budget("m")
    assert final is not None
    assert abs(final / (3 * true_p99) - 1) < 0.25
    later = [b for b in history[2:] if b is not None]
    assert max(later) / min(later) < 1.4  # stable once the window is full


def test_adaptive_memory_bounded() -> None:
    """Windows and keys are bounded, whatever the traffic."""
    budgets = AdaptiveBudgets(window=10, quantile=0.5, multiple=2.0, min_samples=1,
                              max_keys=3)
    for key in "abcde":
        for n in range(50):
            budgets.observe(key, n)
    snap = budgets.snapshot()
    assert list(snap) == ["c", "d", "e"]
    assert all(entry["samples"] == 10 for entry in snap.values())
    assert snap["e"]["budget_tokens"] == 89  # the median of 40..49 is 44.5; times 2
