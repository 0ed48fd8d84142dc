"""Each server's thinking switches."""

from __future__ import annotations

from sidecar.simulator.common.thinking import thinking_enabled


def test_thinking_switches() -> None:
    """Only chat_template_kwargs and reasoning_effort turn thinking off."""
    assert thinking_enabled({})
    assert not thinking_enabled({"chat_template_kwargs": {"enable_thinking": False}})
    assert not thinking_enabled({"chat_template_kwargs": {"thinking": False}})
    assert not thinking_enabled({"reasoning_effort": "none"})
    assert thinking_enabled({"reasoning_effort": "low"})
    assert thinking_enabled(
        {"reasoning_effort": "none", "chat_template_kwargs": {"enable_thinking": True}}
    )
    assert thinking_enabled({"thinking": False})
