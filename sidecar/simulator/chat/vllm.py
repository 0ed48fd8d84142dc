"""vLLM 0.32.0's ``/v1/chat/completions`` on the wire (``--reasoning-parser qwen3``, so
usage has reasoning details). Pure: values in, bytes out.

Exactly as captured in ``tests/data/captures/vllm-0.32.0``: a role-only first chunk per
choice, reasoning in ``delta.reasoning``, ``stop_reason`` and ``token_ids`` in the finish
chunk, ``system_fingerprint`` on the finish chunk unless a usage chunk follows, then
``data: [DONE]`` (:mod:`~sidecar.simulator.common.openai_wire` frames and ends streams).
:class:`VllmChat` is also the base the other servers' wires (:mod:`.servers`) override.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sidecar.simulator.common.openai_wire import (
    ChoiceResult,
    StreamIdentity,
    Usage,
    vllm_body,
    vllm_chunk,
    vllm_usage,
)


def chat_usage(usage: Usage) -> dict[str, Any]:
    """vLLM's chat ``usage``: the completions layout plus the reasoning tokens."""
    return {
        **vllm_usage(usage),
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


class VllmChat:
    """vLLM 0.32.0's chat chunks and bodies."""

    #: True for servers without a role-only first chunk: the first delta of each choice
    #: carries ``role`` (Ollama's OpenAI layer).
    role_in_first_delta = False
    #: The delta of the finish chunk that an invisible token (end of sequence) produces.
    #: vLLM 0.32 sends ``{"content": ""}`` there (seen in tests/data/captures/e2e).
    eos_delta: dict[str, str] = {"content": ""}  # noqa: RUF012 - read-only class constant

    def role_chunk(self, ident: StreamIdentity, index: int, usage: Usage | None) -> bytes:
        """The first chunk of a choice."""
        choice = {
            "index": index,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
        return vllm_chunk(
            ident,
            "chat.completion.chunk",
            [choice],
            None if usage is None else chat_usage(usage),
            None,
            prompt_token_ids=None,
            prompt_text=None,
        )

    def delta_chunk(
        self,
        ident: StreamIdentity,
        index: int,
        delta: dict[str, str],
        *,
        finish_reason: str | None,
        stop_reason: str | None,
        usage: Usage | None,
        fingerprint: str | None,
    ) -> bytes:
        """A chunk with one token's delta, or the finish chunk of a choice."""
        choice: dict[str, Any] = {
            "index": index,
            "delta": delta,
            "logprobs": None,
            "finish_reason": finish_reason,
        }
        if finish_reason is not None:
            choice["stop_reason"] = stop_reason
        choice["token_ids"] = None
        return vllm_chunk(
            ident,
            "chat.completion.chunk",
            [choice],
            None if usage is None else chat_usage(usage),
            fingerprint,
        )

    def usage_chunk(self, ident: StreamIdentity, usage: Usage, fingerprint: str) -> bytes:
        """The trailing usage-only chunk."""
        return vllm_chunk(ident, "chat.completion.chunk", [], chat_usage(usage), fingerprint)

    def choice_end(self, ident: StreamIdentity, index: int, finish_reason: str,
                   usage: Usage, *, include_usage: bool) -> bytes:
        """The end of one choice on servers that end choices alone: its finish chunk and,
        if asked for, that choice's usage."""
        raise NotImplementedError(f"{type(self).__name__} ends all choices together")

    def response(
        self,
        ident: StreamIdentity,
        choices: Sequence[ChoiceResult],
        usage: Usage,
        fingerprint: str,
    ) -> bytes:
        """A whole non-streaming chat completion body."""
        return vllm_body(
            ident,
            "chat.completion",
            [
                {
                    "index": c.index,
                    "message": {
                        "role": "assistant",
                        "content": c.content,
                        "refusal": None,
                        "annotations": None,
                        "audio": None,
                        "function_call": None,
                        "reasoning": c.reasoning,
                    },
                    "logprobs": None,
                    "finish_reason": c.finish_reason,
                    "stop_reason": c.stop_reason,
                    "token_ids": None,
                    "routed_experts": None,
                }
                for c in choices
            ],
            usage,
            {"reasoning_tokens": usage.reasoning_tokens},
            fingerprint,
            prompt_logprobs=None,
            prompt_token_ids=None,
            prompt_text=None,
            kv_transfer_params=None,
            ec_transfer_params=None,
            metrics=None,
        )
