"""What the simulated node's two agent APIs share when reading a request: each server's
thinking switches, the model check and vLLM's handler errors. Pure.

Thinking switches per server (:data:`SWITCHES`): vLLM maps messages'
``thinking: {"type": "disabled"}`` to ``reasoning_effort: "none"`` (what its probe picks
for a Qwen3 template) and ``{"type": "enabled", "budget_tokens": N}`` to
``thinking_token_budget``; Responses' ``reasoning.effort: "none"`` turns thinking off;
``chat_template_kwargs.enable_thinking`` wins over both. llama.cpp ignores
``thinking.disabled`` (captured); Ollama maps ``thinking``/``effort`` to ``think`` and
ignores ``chat_template_kwargs`` (source-read); SGLang honours ``thinking.disabled``
(documented only).

Errors the handlers return are :class:`~sidecar.simulator.requests.ApiError` (answered
Anthropic-shaped on ``/v1/messages``); request-model errors are
:class:`~sidecar.simulator.body_checks.BodyValidationError`. The readers themselves are
:mod:`~sidecar.simulator.messages_request` and :mod:`~sidecar.simulator.responses_request`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sidecar.simulator.requests import ApiError, thinking_enabled


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
    chat_like: dict[str, Any] = {}
    if switch.honours_template_kwargs and kwargs is not None:
        chat_like["chat_template_kwargs"] = dict(kwargs)
    if effort is not None:
        chat_like["reasoning_effort"] = effort
    return thinking_enabled(chat_like)


def known_model(model: str, known: tuple[str, ...]) -> None:
    if model not in known:
        raise ApiError(404, f"The model `{model}` does not exist. "
                            f"Valid aliases: {', '.join(known)}.", "NotFoundError", "model")


def prompt_fits(prompt_tokens: int, max_model_len: int) -> None:
    if prompt_tokens >= max_model_len:
        # ⚠ Chat's wording for an over-long prompt; not captured on this endpoint.
        raise ApiError(400, f"This model's maximum context length is {max_model_len} tokens. "
                            f"However, your request has {prompt_tokens} input tokens. Please "
                            "reduce the length of the input messages. (parameter=input_tokens, "
                            f"value={prompt_tokens})", "BadRequestError", "input_tokens")


def not_found(response_id: str) -> ApiError:
    """vLLM's answer for a response id it does not hold (always, without the store)."""
    return ApiError(404, f"Response with id '{response_id}' not found.",
                    "invalid_request_error", "response_id")
