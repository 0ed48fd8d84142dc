"""What the two OpenAI-style routes of a simulated server (``/v1/chat/completions`` and
``/v1/completions``) share on the wire. Pure: values in, bytes out.

- The values both encode: :class:`Usage`, :class:`StreamIdentity`, :class:`ChoiceResult`.
- Per server, an :class:`OpenAIServer`: its response headers, the end of a stream, how it
  words an error before and inside a stream, and whether it ends each choice of a stream
  on its own. vLLM 0.32's is exactly as captured in ``tests/data/captures/vllm-0.32.0``;
  llama.cpp's as recorded from a real ``llama-server`` (⚠ its in-stream error was not
  provoked); SGLang's and Ollama's follow ``docs/protocols.md`` §8-9 (⚠ not checked
  against a live server). The plain routes answer errors with it too.
- The chunk and body layouts a server's two routes share: vLLM's (:func:`vllm_chunk`,
  :func:`vllm_body`; key order, explicit nulls, which chunk carries ``usage`` and
  ``system_fingerprint``) and llama.cpp's (:func:`llamacpp_tail`, :func:`llamacpp_body`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from sidecar.simulator.common.sse import DONE, data_event

#: llama.cpp's error type for a prompt longer than a slot's context.
CONTEXT_OVERFLOW = "exceed_context_size_error"
LLAMACPP_FINGERPRINT = "b7000-sim"


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


class OpenAIServer:
    """vLLM 0.32.0's OpenAI-compatible layer; the other servers override what differs."""

    #: Response headers of the generation routes: of a stream, and of a JSON body.
    sse_headers: Mapping[str, str] = {
        "server": "uvicorn", "content-type": "text/event-stream; charset=utf-8", "vary": "Origin"}
    json_headers: Mapping[str, str] = {"server": "uvicorn", "content-type": "application/json"}
    #: True for servers that end every choice of a stream on its own (llama.cpp runs each
    #: choice as a task): the last token of a choice is written by the API's
    #: ``choice_end``, usage included, and no usage chunk for all choices follows.
    ends_choices_alone = False

    def done(self) -> bytes:
        """The end-of-stream marker."""
        return DONE

    def done_after_error(self) -> bytes:
        """What follows an in-stream error event: ``done()`` unless the server just stops."""
        return self.done()

    def error_body(self, message: str, err_type: str, param: str | None, code: int,
                   details: Mapping[str, int] | None = None) -> bytes:
        """An error as a JSON body (before any stream started); ``details`` are extra
        fields a server adds to some errors (llama.cpp's context overflow)."""
        return orjson.dumps(
            {"error": {"message": message, "type": err_type, "param": param, "code": code}}
        )

    def stream_error(self, message: str, err_type: str, code: int) -> bytes:
        """An error event inside a stream that already answered 200."""
        return data_event(self.error_body(message, err_type, None, code))


class LlamaCppServer(OpenAIServer):
    """llama.cpp ``llama-server``: its own headers and error object, choices that end on
    their own, and **no** ``[DONE]`` after an in-stream error (⚠ not provoked against the
    real server)."""

    sse_headers = {"Server": "llama.cpp", "Access-Control-Allow-Origin": "",  # noqa: RUF012
                   "X-Accel-Buffering": "no", "Content-Type": "text/event-stream"}
    json_headers = {"Server": "llama.cpp", "Access-Control-Allow-Origin": "",  # noqa: RUF012
                    "Content-Type": "application/json; charset=utf-8"}
    ends_choices_alone = True

    def done_after_error(self) -> bytes:
        return b""

    def error_body(self, message: str, err_type: str, param: str | None, code: int,
                   details: Mapping[str, int] | None = None) -> bytes:
        kind = {400: "invalid_request_error", 404: "not_found_error"}.get(code, "server_error")
        if err_type == CONTEXT_OVERFLOW:
            kind = err_type
        return orjson.dumps({"error": {"code": code, "message": message, "type": kind,
                                       **(details or {})}})

    def stream_error(self, message: str, err_type: str, code: int) -> bytes:
        return data_event(orjson.dumps(
            {"error": {"code": code, "message": message, "type": "server_error"}}))


class SglangServer(OpenAIServer):
    """SGLang 0.5.23: errors in a stream are followed by ``[DONE]``."""

    def error_body(self, message: str, err_type: str, param: str | None, code: int,
                   details: Mapping[str, int] | None = None) -> bytes:
        # ⚠ Before a stream, SGLang's ErrorResponse is not wrapped in "error".
        return orjson.dumps({"object": "error", "message": message, "type": err_type,
                             "param": param, "code": code})

    def stream_error(self, message: str, err_type: str, code: int) -> bytes:
        return data_event(orjson.dumps({"error": {"object": "error", "message": message,
                                                  "type": err_type, "param": None,
                                                  "code": code}}))


class OllamaServer(OpenAIServer):
    """Ollama's OpenAI layer (vLLM's headers kept)."""

    def done_after_error(self) -> bytes:
        # ⚠ Ollama's OpenAI layer writes the error event and returns; no [DONE] follows.
        return b""

    def error_body(self, message: str, err_type: str, param: str | None, code: int,
                   details: Mapping[str, int] | None = None) -> bytes:
        # Ollama's OpenAI error: {"error":{"message","type","param","code"}} (⚠ type names).
        return orjson.dumps({"error": {"message": message, "type": "invalid_request_error"
                                       if code < 500 else "api_error", "param": None,
                                       "code": None}})


OPENAI_SERVERS: Mapping[str, type[OpenAIServer]] = {
    "vllm": OpenAIServer, "llamacpp": LlamaCppServer, "sglang": SglangServer,
    "ollama": OllamaServer,
}


# ------------------------------------------------------------------- vLLM's layouts


def vllm_usage(usage: Usage) -> dict[str, Any]:
    """``usage`` as vLLM writes it on ``/v1/completions`` (chat adds its details)."""
    return {
        "prompt_tokens": usage.prompt_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "completion_tokens": usage.completion_tokens,
    }


def vllm_head(ident: StreamIdentity, obj: str) -> dict[str, Any]:
    """The keys every vLLM chunk and body starts with."""
    return {"id": ident.id, "object": obj, "created": ident.created, "model": ident.model}


def vllm_chunk(
    ident: StreamIdentity,
    obj: str,
    choices: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    fingerprint: str | None,
    **tail: None,
) -> bytes:
    """One stream event: the head, ``choices``, then ``usage`` and ``system_fingerprint``
    where given, then the ``tail`` keys in order."""
    chunk = vllm_head(ident, obj)
    chunk["choices"] = choices
    if usage is not None:
        chunk["usage"] = usage
    if fingerprint is not None:
        chunk["system_fingerprint"] = fingerprint
    chunk.update(tail)
    # Compact separators and raw UTF-8, like pydantic's model_dump_json.
    return data_event(orjson.dumps(chunk))


def vllm_body(
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
    body = vllm_head(ident, obj)
    body["choices"] = choices
    body["service_tier"] = None
    body["system_fingerprint"] = fingerprint
    body["usage"] = {
        **vllm_usage(usage),
        "prompt_tokens_details": None,
        "completion_tokens_details": completion_details,
    }
    body.update(tail)
    return orjson.dumps(body)


# -------------------------------------------------------------- llama.cpp's layouts


def llamacpp_tail(ident: StreamIdentity, obj: str) -> dict[str, Any]:
    """The keys after ``choices`` in every llama.cpp chunk."""
    return {"created": ident.created, "id": ident.id, "model": ident.model,
            "system_fingerprint": LLAMACPP_FINGERPRINT, "object": obj}


def llamacpp_usage(usage: Usage) -> dict[str, Any]:
    """llama.cpp's ``usage`` (the simulator has no prompt cache)."""
    return {"completion_tokens": usage.completion_tokens,
            "prompt_tokens": usage.prompt_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": 0}}


def llamacpp_timings(usage: Usage) -> dict[str, Any]:
    """llama.cpp's ``timings``, made up from the token counts (1 ms a generated token,
    0.1 ms a prompt token)."""
    prompt_n, predicted_n = usage.prompt_tokens, usage.completion_tokens
    prompt_ms, predicted_ms = prompt_n * 0.1, predicted_n * 1.0

    def rate(n: int, ms: float) -> tuple[float, float]:
        return (ms / n, 1e3 * n / ms) if n else (0.0, 0.0)

    prompt_per_token, prompt_per_second = rate(prompt_n, prompt_ms)
    predicted_per_token, predicted_per_second = rate(predicted_n, predicted_ms)
    return {"cache_n": 0, "prompt_n": prompt_n, "prompt_ms": prompt_ms,
            "prompt_per_token_ms": prompt_per_token, "prompt_per_second": prompt_per_second,
            "predicted_n": predicted_n, "predicted_ms": predicted_ms,
            "predicted_per_token_ms": predicted_per_token,
            "predicted_per_second": predicted_per_second}


def llamacpp_body(body: dict[str, Any], ident: StreamIdentity, obj: str,
                  usage: Usage) -> bytes:
    """A non-streaming body: ``choices``, then ``created, model, system_fingerprint,
    object, usage, id, timings``."""
    body.update({"created": ident.created, "model": ident.model,
                 "system_fingerprint": LLAMACPP_FINGERPRINT, "object": obj,
                 "usage": llamacpp_usage(usage), "id": ident.id,
                 "timings": llamacpp_timings(usage)})
    return orjson.dumps(body)
