"""vLLM 0.32.0's ``/v1/completions`` on the wire. Pure: values in, bytes out.

Streams as captured in ``tests/data/captures/vllm-0.32.0``; the non-streaming body is not
captured, its field order follows vLLM's ``CompletionResponse`` model (full dump).
:class:`VllmCompletions` is also the layout SGLang and Ollama keep on this route (⚠ not
documented for them) and the base of llama.cpp's (:mod:`.servers`).
"""

from __future__ import annotations

from collections.abc import Sequence

from sidecar.simulator.common.openai_wire import (
    ChoiceResult,
    StreamIdentity,
    Usage,
    vllm_body,
    vllm_chunk,
    vllm_usage,
)


class VllmCompletions:
    """vLLM 0.32.0's completion chunks and bodies."""

    def chunk(
        self,
        ident: StreamIdentity,
        index: int,
        text: str,
        *,
        finish_reason: str | None,
        stop_reason: str | None,
        usage: Usage | None,
        fingerprint: str | None,
    ) -> bytes:
        """A stream chunk with one token's text, or the finish chunk of a choice."""
        choice = {
            "index": index,
            "text": text,
            "logprobs": None,
            "finish_reason": finish_reason,
            "stop_reason": stop_reason,
            "prompt_token_ids": None,
            "token_ids": None,
        }
        return vllm_chunk(
            ident,
            "text_completion",
            [choice],
            None if usage is None else vllm_usage(usage),
            fingerprint,
        )

    def usage_chunk(self, ident: StreamIdentity, usage: Usage, fingerprint: str) -> bytes:
        """The trailing usage-only chunk."""
        return vllm_chunk(ident, "text_completion", [], vllm_usage(usage), fingerprint)

    def choice_end(self, ident: StreamIdentity, index: int, finish_reason: str,
                   usage: Usage, *, include_usage: bool) -> bytes:
        """The end of one choice on servers that end choices alone."""
        raise NotImplementedError(f"{type(self).__name__} ends all choices together")

    def response(
        self,
        ident: StreamIdentity,
        choices: Sequence[ChoiceResult],
        usage: Usage,
        fingerprint: str,
    ) -> bytes:
        """A whole non-streaming body."""
        return vllm_body(
            ident,
            "text_completion",
            [
                {
                    "index": c.index,
                    "text": (c.reasoning or "") + (c.content or ""),
                    "logprobs": None,
                    "finish_reason": c.finish_reason,
                    "stop_reason": c.stop_reason,
                    "token_ids": None,
                    "prompt_logprobs": None,
                    "prompt_token_ids": None,
                    "routed_experts": None,
                }
                for c in choices
            ],
            usage,
            None,
            fingerprint,
            kv_transfer_params=None,
            ec_transfer_params=None,
            metrics=None,
        )
