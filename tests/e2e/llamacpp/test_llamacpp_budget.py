"""Real llama.cpp: thinking budgets, the sidecar's own and llama.cpp's per-request one.

- The sidecar's budget detector (``X-Thinking-Budget``, or the body's
  ``thinking_token_budget``) counts thinking tokens as they stream and, at the budget, cuts
  and reissues with thinking off, whatever the server.
- llama.cpp's own per-request budget is ``thinking_budget_tokens``, also spelled
  ``reasoning_budget_tokens`` (``-1``: none): the server forces ``</think>`` after that many
  reasoning tokens and the model goes on to answer, in one attempt; the sidecar sees a
  healthy stream and relays it. ``0`` turns thinking off. vLLM's field,
  ``thinking_token_budget``, means nothing to llama.cpp (the sidecar reads it for its own
  detector and passes it on, and the server ignores it).
"""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.llamacpp

MAX_TOKENS = 4000
USAGE = {"stream_options": {"include_usage": True}}
PREFIX = "\n\n"  # see THINK_OFF_PREFIX in test_llamacpp_loop.py


def _actions(comments: list[str]) -> list[str]:
    found = [re.search(r"\baction=(\S+)", c) for c in comments if c.startswith("runaway")]
    return [m.group(1) for m in found if m]


def _detectors(comments: list[str]) -> list[str]:
    found = [re.search(r"\bdetector=(\S+)", c) for c in comments if c.startswith("runaway")]
    return [m.group(1) for m in found if m]


@pytest.mark.parametrize("how", ["header", "body"])
def test_sidecar_budget_cuts_healthy_thinking_and_answers(healthy_node, how) -> None:
    """A 40-token thinking budget cuts the healthy model's 301-token thought at 40 tokens
    and the thinking-off reissue answers, in one stream."""
    healthy_node.wait_idle()
    before = healthy_node.predicted()
    headers = {"X-Thinking-Budget": "40"} if how == "header" else None
    extra = {"extra_body": {"thinking_token_budget": 40}} if how == "body" else {}
    result = healthy_node.stream(headers=headers, messages=healthy_node.messages(f"budget-{how}"),
                                 max_tokens=MAX_TOKENS, **USAGE, **extra)
    healthy_node.wait_idle(timeout=2.0)
    generated = healthy_node.predicted() - before
    assert result.errors == []
    assert result.done
    assert len(result.identity()) == 1
    assert _actions(result.comments) == ["reissue:no-think"]
    assert _detectors(result.comments) == ["thinking_token_budget"]
    assert healthy_node.script["healthy_thought"].startswith(result.reasoning[0])
    assert healthy_node.count_tokens(result.reasoning[0]) == 40
    assert result.content == {0: PREFIX + healthy_node.script["answer"]}
    assert result.finish == {0: "stop"}
    # The cut reached llama.cpp before the thought was done: both attempts together
    # generated less than the uncut answer (thought, </think>, answer) alone.
    assert generated < healthy_node.info["thinking_tokens"]


@pytest.mark.parametrize("field", ["thinking_budget_tokens", "reasoning_budget_tokens"])
def test_server_budget_ends_thinking_in_one_attempt(loop_node, field) -> None:
    """llama.cpp's own budget field ends the loop after 20 reasoning tokens; the model
    answers; the sidecar relays it untouched (no cut, no reissue)."""
    body = {"messages": loop_node.messages(f"server-{field}"), "max_tokens": MAX_TOKENS,
            "extra_body": {field: 20}, **USAGE}
    result = loop_node.stream(**body)
    assert result.comments == []
    assert loop_node.count_tokens(result.reasoning[0]) == 20
    assert loop_node.script["thinking_loop"].startswith(result.reasoning[0])
    assert result.content == {0: PREFIX + loop_node.script["answer"]}
    assert result.finish == {0: "stop"}
    assert result.usage is not None
    assert result.usage.completion_tokens < 64


@pytest.mark.parametrize("field", ["thinking_budget_tokens", "reasoning_budget_tokens"])
def test_server_budget_zero_turns_thinking_off(loop_node, field) -> None:
    """A budget of 0 is thinking off: no reasoning, the answer, through the sidecar."""
    result = loop_node.stream(messages=loop_node.messages(f"zero-{field}"),
                              max_tokens=MAX_TOKENS, extra_body={field: 0}, **USAGE)
    assert result.comments == []
    assert result.reasoning.get(0, "") == ""
    assert result.content == {0: PREFIX + loop_node.script["answer"]}
    assert result.finish == {0: "stop"}


def test_vllm_budget_field_is_not_llamacpps(loop_node) -> None:
    """Straight to llama.cpp, vLLM's thinking_token_budget changes nothing: the loop runs
    to max_tokens (so a dialect must not map a budget onto it)."""
    result = loop_node.stream("llamacpp", messages=loop_node.messages("vllm-field"),
                              max_tokens=120, extra_body={"thinking_token_budget": 20})
    assert result.finish == {0: "length"}
    assert result.content.get(0, "") == ""
    assert loop_node.count_tokens(result.reasoning[0]) == 120 - 1  # the first is <think>
