"""Byte-true wire encoding of the simulated node's responses. Pure: values in, bytes out.

:class:`WireDialect` is the interface a server dialect implements; :class:`Vllm032Wire`
reproduces vLLM 0.32 (``--reasoning-parser qwen3``) exactly as captured in
``tests/data/captures/vllm-0.32.0``: key order, explicit nulls, which chunk carries
``usage`` and ``system_fingerprint``, ``data: …\\n\\n`` framing and ``data: [DONE]``.
Other dialects (llama.cpp, SGLang, Ollama) subclass :class:`WireDialect`.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of a response or of one choice so far."""

    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int


@dataclass(frozen=True, slots=True)
class StreamIdentity:
    """The fields every chunk of one stream repeats."""

    id: str
    created: int
    model: str


@dataclass(frozen=True, slots=True)
class ChoiceResult:
    """One finished choice of a non-streaming response."""

    index: int
    reasoning: str | None
    content: str | None
    finish_reason: str
    stop_reason: str | None


def _dumps(obj: Any) -> bytes:
    # Compact separators and raw UTF-8, like pydantic's model_dump_json.
    return orjson.dumps(obj)


class WireDialect(abc.ABC):
    """What a simulated server dialect must be able to encode."""

    #: True for servers without a role-only first chunk: the first delta of each choice
    #: carries ``role`` (Ollama's OpenAI layer).
    role_in_first_delta = False
    #: The delta of the finish chunk that an invisible token (end of sequence) produces.
    #: vLLM 0.32 sends ``{"content": ""}`` there (seen in tests/data/captures/e2e).
    eos_delta: dict[str, str] = {}  # noqa: RUF012 - read-only class constant
    #: Response headers of the generation routes: of a stream, and of a JSON body.
    sse_headers: Mapping[str, str] = {
        "server": "uvicorn", "content-type": "text/event-stream; charset=utf-8", "vary": "Origin"}
    json_headers: Mapping[str, str] = {"server": "uvicorn", "content-type": "application/json"}
    #: True for servers that end every choice of a stream on its own (llama.cpp runs each
    #: choice as a task): the last token of a choice is written by ``chat_choice_end`` or
    #: ``completion_choice_end``, usage included, and no usage chunk for all choices follows.
    ends_choices_alone = False
    #: Text a server puts before the answer when thinking is off (chat, template pre-fill).
    thinking_off_prefix = ""

    def done_after_error(self) -> bytes:
        """What follows an in-stream error event: ``done()`` unless the server just stops."""
        return self.done()

    @abc.abstractmethod
    def event(self, payload: bytes) -> bytes:
        """Frame one stream event."""

    @abc.abstractmethod
    def done(self) -> bytes:
        """The end-of-stream marker (may be empty for dialects without one)."""

    @abc.abstractmethod
    def chat_role_chunk(self, ident: StreamIdentity, index: int, usage: Usage | None) -> bytes:
        """The first chunk of a chat choice."""

    @abc.abstractmethod
    def chat_delta_chunk(
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

    @abc.abstractmethod
    def chat_usage_chunk(self, ident: StreamIdentity, usage: Usage, fingerprint: str) -> bytes:
        """The trailing usage-only chunk."""

    @abc.abstractmethod
    def chat_response(
        self,
        ident: StreamIdentity,
        choices: Sequence[ChoiceResult],
        usage: Usage,
        fingerprint: str,
    ) -> bytes:
        """A whole non-streaming chat completion body."""

    @abc.abstractmethod
    def completion_chunk(
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
        """A ``/v1/completions`` stream chunk."""

    @abc.abstractmethod
    def completion_usage_chunk(
        self, ident: StreamIdentity, usage: Usage, fingerprint: str
    ) -> bytes:
        """The trailing usage-only chunk of ``/v1/completions``."""

    @abc.abstractmethod
    def completion_response(
        self,
        ident: StreamIdentity,
        choices: Sequence[ChoiceResult],
        usage: Usage,
        fingerprint: str,
    ) -> bytes:
        """A whole non-streaming ``/v1/completions`` body."""

    def chat_choice_end(self, ident: StreamIdentity, index: int, finish_reason: str,
                        usage: Usage, *, include_usage: bool) -> bytes:
        """The end of one chat choice (``ends_choices_alone`` wires): its finish chunk and,
        if asked for, that choice's usage."""
        raise NotImplementedError(f"{type(self).__name__} ends all choices together")

    def completion_choice_end(self, ident: StreamIdentity, index: int, finish_reason: str,
                              usage: Usage, *, include_usage: bool) -> bytes:
        """The end of one ``/v1/completions`` choice (``ends_choices_alone`` wires)."""
        raise NotImplementedError(f"{type(self).__name__} ends all choices together")

    @abc.abstractmethod
    def error_body(self, message: str, err_type: str, param: str | None, code: int,
                   details: Mapping[str, int] | None = None) -> bytes:
        """An error as a JSON body (before any stream started); ``details`` are extra
        fields a server adds to some errors (llama.cpp's context overflow)."""

    @abc.abstractmethod
    def stream_error(self, message: str, err_type: str, code: int) -> bytes:
        """An error event inside a stream that already answered 200."""


class Vllm032Wire(WireDialect):
    """vLLM 0.32.0 with a reasoning parser configured (so usage has reasoning details)."""

    eos_delta = {"content": ""}  # noqa: RUF012 - read-only class constant

    def event(self, payload: bytes) -> bytes:
        return b"data: " + payload + b"\n\n"

    def done(self) -> bytes:
        return b"data: [DONE]\n\n"

    @staticmethod
    def _completion_usage(usage: Usage) -> dict[str, Any]:
        return {
            "prompt_tokens": usage.prompt_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens,
            "completion_tokens": usage.completion_tokens,
        }

    @classmethod
    def _chat_usage(cls, usage: Usage) -> dict[str, Any]:
        return {
            **cls._completion_usage(usage),
            "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        }

    @staticmethod
    def _head(ident: StreamIdentity, obj: str) -> dict[str, Any]:
        return {"id": ident.id, "object": obj, "created": ident.created, "model": ident.model}

    def _stream_chunk(
        self,
        ident: StreamIdentity,
        obj: str,
        choices: list[dict[str, Any]],
        usage: dict[str, Any] | None,
        fingerprint: str | None,
        **tail: None,
    ) -> bytes:
        """One stream event: the head, ``choices``, then ``usage`` and ``system_fingerprint``
        where given, then the ``tail`` keys in order."""
        chunk = self._head(ident, obj)
        chunk["choices"] = choices
        if usage is not None:
            chunk["usage"] = usage
        if fingerprint is not None:
            chunk["system_fingerprint"] = fingerprint
        chunk.update(tail)
        return self.event(_dumps(chunk))

    def _response(
        self,
        ident: StreamIdentity,
        obj: str,
        choices: list[dict[str, Any]],
        usage: Usage,
        completion_details: dict[str, int] | None,
        fingerprint: str,
        **tail: None,
    ) -> bytes:
        """A whole non-streaming body: the head, ``choices``, service tier, fingerprint,
        full usage, then the ``tail`` keys in order."""
        body = self._head(ident, obj)
        body["choices"] = choices
        body["service_tier"] = None
        body["system_fingerprint"] = fingerprint
        body["usage"] = {
            **self._completion_usage(usage),
            "prompt_tokens_details": None,
            "completion_tokens_details": completion_details,
        }
        body.update(tail)
        return _dumps(body)

    def chat_role_chunk(self, ident: StreamIdentity, index: int, usage: Usage | None) -> bytes:
        choice = {
            "index": index,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
        return self._stream_chunk(
            ident,
            "chat.completion.chunk",
            [choice],
            None if usage is None else self._chat_usage(usage),
            None,
            prompt_token_ids=None,
            prompt_text=None,
        )

    def chat_delta_chunk(
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
        choice: dict[str, Any] = {
            "index": index,
            "delta": delta,
            "logprobs": None,
            "finish_reason": finish_reason,
        }
        if finish_reason is not None:
            choice["stop_reason"] = stop_reason
        choice["token_ids"] = None
        return self._stream_chunk(
            ident,
            "chat.completion.chunk",
            [choice],
            None if usage is None else self._chat_usage(usage),
            fingerprint,
        )

    def chat_usage_chunk(self, ident: StreamIdentity, usage: Usage, fingerprint: str) -> bytes:
        return self._stream_chunk(
            ident, "chat.completion.chunk", [], self._chat_usage(usage), fingerprint
        )

    def chat_response(
        self,
        ident: StreamIdentity,
        choices: Sequence[ChoiceResult],
        usage: Usage,
        fingerprint: str,
    ) -> bytes:
        return self._response(
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

    def completion_chunk(
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
        choice = {
            "index": index,
            "text": text,
            "logprobs": None,
            "finish_reason": finish_reason,
            "stop_reason": stop_reason,
            "prompt_token_ids": None,
            "token_ids": None,
        }
        return self._stream_chunk(
            ident,
            "text_completion",
            [choice],
            None if usage is None else self._completion_usage(usage),
            fingerprint,
        )

    def completion_usage_chunk(
        self, ident: StreamIdentity, usage: Usage, fingerprint: str
    ) -> bytes:
        return self._stream_chunk(
            ident, "text_completion", [], self._completion_usage(usage), fingerprint
        )

    def completion_response(
        self,
        ident: StreamIdentity,
        choices: Sequence[ChoiceResult],
        usage: Usage,
        fingerprint: str,
    ) -> bytes:
        # Not captured; field order follows vLLM's CompletionResponse model (full dump).
        return self._response(
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

    def error_body(self, message: str, err_type: str, param: str | None, code: int,
                   details: Mapping[str, int] | None = None) -> bytes:
        return _dumps(
            {"error": {"message": message, "type": err_type, "param": param, "code": code}}
        )

    def stream_error(self, message: str, err_type: str, code: int) -> bytes:
        return self.event(self.error_body(message, err_type, None, code))
