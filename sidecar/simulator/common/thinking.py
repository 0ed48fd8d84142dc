"""How each simulated server turns thinking on and off. Pure.

On chat (:func:`thinking_enabled`): ``chat_template_kwargs.enable_thinking`` (or
``.thinking``) false turns it off; without ``enable_thinking``, ``reasoning_effort:
"none"`` does too.

On the agent APIs, per server (:data:`SWITCHES`): vLLM maps messages'
``thinking: {"type": "disabled"}`` to ``reasoning_effort: "none"`` (what its probe picks
for a Qwen3 template) and ``{"type": "enabled", "budget_tokens": N}`` to
``thinking_token_budget``; Responses' ``reasoning.effort: "none"`` turns thinking off;
``chat_template_kwargs.enable_thinking`` wins over both. llama.cpp ignores
``thinking.disabled`` (captured); Ollama maps ``thinking``/``effort`` to ``think`` and
ignores ``chat_template_kwargs`` (source-read); SGLang honours ``thinking.disabled``
(documented only).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def thinking_enabled(body: Mapping[str, Any]) -> bool:
    """Whether thinking stays on: ``chat_template_kwargs.enable_thinking`` or ``.thinking``
    false turns it off; without ``enable_thinking``, ``reasoning_effort: "none"`` does too."""
    kwargs = body.get("chat_template_kwargs")
    if not isinstance(kwargs, Mapping):
        kwargs = {}
    if "enable_thinking" in kwargs:
        if kwargs["enable_thinking"] is False:
            return False
    elif body.get("reasoning_effort") == "none":
        return False
    return kwargs.get("thinking") is not False


@dataclass(frozen=True, slots=True)
class Switches:
    """How one server turns thinking off on the agent APIs (see the module docstring)."""

    messages_disabled_off: bool  # thinking: {"type": "disabled"} turns thinking off
    messages_budget: bool  # thinking.enabled.budget_tokens becomes a thinking budget
    honours_template_kwargs: bool  # chat_template_kwargs.enable_thinking is read
    effort_none_off: bool  # Responses' reasoning.effort "none" turns thinking off


SWITCHES: Mapping[str, Switches] = {
    "vllm": Switches(True, True, True, True),
    # Captured: thinking.disabled leaves thinking on; chat_template_kwargs and effort "none"
    # turn it off. ⚠ budget_tokens: not captured, treated as ignored.
    "llamacpp": Switches(False, False, True, True),
    # ⚠ Documented only (request_conversion.py, commit bef8e238): disabled turns it off,
    # budget_tokens is accepted but not enforced.
    "sglang": Switches(True, False, True, True),
    # ⚠ Source-read (anthropic.go, responses.go at 017eb8ae): think=false; no kwargs.
    "ollama": Switches(True, False, False, True),
}


def thinking_on(switch: Switches, kwargs: Mapping[str, Any] | None,
                effort: str | None) -> bool:
    """Whether thinking is on for an agent-API request on a server with ``switch``."""
    chat_like: dict[str, Any] = {}
    if switch.honours_template_kwargs and kwargs is not None:
        chat_like["chat_template_kwargs"] = dict(kwargs)
    if effort is not None:
        chat_like["reasoning_effort"] = effort
    return thinking_enabled(chat_like)


def thinking_off_prefix(dialect: str) -> str:
    """Text a server puts before the answer when the template pre-filled an empty think
    block: llama.cpp's parser hands the block's trailing ``"\\n\\n"`` to the answer
    (captured); the others put nothing."""
    return "\n\n" if dialect == "llamacpp" else ""
