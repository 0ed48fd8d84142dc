"""Reading a Messages body: each server's thinking switches."""

from __future__ import annotations

from typing import Any

import pytest

from sidecar.simulator.messages.request import check_messages, messages_thinking

HELLO: list[Any] = [{"role": "user", "content": "Hello"}]


@pytest.mark.parametrize(("dialect", "body", "thinking", "budget"), [
    ("vllm", {"thinking": {"type": "disabled"}}, False, None),
    ("vllm", {"thinking": {"type": "enabled", "budget_tokens": 2000}}, True, 2000),
    ("vllm", {"chat_template_kwargs": {"enable_thinking": False}}, False, None),
    ("vllm", {"thinking": {"type": "disabled"},
              "chat_template_kwargs": {"enable_thinking": True}}, True, None),
    ("vllm", {"output_config": {"effort": "high"}}, True, None),
    ("llamacpp", {"thinking": {"type": "disabled"}}, True, None),
    ("llamacpp", {"thinking": {"type": "enabled", "budget_tokens": 2000}}, True, None),
    ("llamacpp", {"chat_template_kwargs": {"enable_thinking": False}}, False, None),
    ("sglang", {"thinking": {"type": "disabled"}}, False, None),
    ("ollama", {"thinking": {"type": "disabled"}}, False, None),
    ("ollama", {"chat_template_kwargs": {"enable_thinking": False}}, True, None),
])
def test_messages_thinking_switch_per_server(dialect: str, body: dict[str, Any],
                                             thinking: bool, budget: int | None) -> None:
    """Which request fields turn thinking off, and which set a budget, on each server."""
    req = check_messages({"model": "m", "max_tokens": 4000, "messages": HELLO, **body})
    assert messages_thinking(req, dialect) == (thinking, budget)
