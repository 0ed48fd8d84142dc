"""Anthropic Messages API encoders of the other simulated servers (vLLM's is in
:mod:`.vllm`, the state machine they share in :mod:`.stream`). Pure.

- :class:`LlamaCppMessages` (``llama-server``): **verified against real bytes**
  (``tests/data/captures/llama.cpp-agent-apis``) for thinking and text streams and the
  non-streaming thinking body: ``index`` before the block, an empty ``signature_delta``,
  ``cache_read_input_tokens`` first in usage (0 here: the simulated node keeps no prompt
  cache), ``message_delta`` usage with ``output_tokens`` only, ``stop_sequence: null``
  kept. ⚠ Not captured: a thinking-then-text stream, the non-streaming text block, the
  error shapes.
- :class:`OllamaMessages`: ⚠ **documentation only** (Ollama ``anthropic/anthropic.go`` at
  ``017eb8ae``, read, not run): struct field order, ``msg_`` + 24 hex, no signature,
  ``stop_reason`` without ``stop_sequence``, Go JSON (:mod:`~sidecar.simulator.common.gojson`),
  a newline after a non-streaming body; an error after output has started just ends the
  stream.
- :class:`SglangMessages`: ⚠ **documentation only** (SGLang ``anthropic/serving.py`` at
  ``0198d48d``): the streaming converter drops reasoning deltas, so a thinking model's
  stream shows only its text blocks; the non-streaming body has a ``thinking`` block with
  ``signature: "dummy-signature"``; ``msg_`` + 32 hex; usage with
  ``cache_read_input_tokens``.
"""

from __future__ import annotations

from typing import Any

from sidecar.simulator.common import gojson
from sidecar.simulator.common.draw import Draw
from sidecar.simulator.messages.stream import MessagesWire, stop_reason
from sidecar.simulator.messages.vllm import VllmMessages


class LlamaCppMessages(MessagesWire):
    """llama.cpp ``llama-server`` (verified in part; see the module docstring)."""

    stream_headers = {"Server": "llama.cpp", "Access-Control-Allow-Origin": "",  # noqa: RUF012
                      "X-Accel-Buffering": "no", "Content-Type": "text/event-stream"}
    json_headers = {"Server": "llama.cpp", "Access-Control-Allow-Origin": "",  # noqa: RUF012
                    "Content-Type": "application/json; charset=utf-8"}

    def message_id(self, draw: Draw, request_id: str | None) -> str:
        return f"chatcmpl-{draw.alnum(32)}"

    def _indexed(self, kind: str, index: int, key: str, value: dict[str, Any]) -> dict[str, Any]:
        return {"type": kind, "index": index, key: value}

    def stream_signature(self, draw: Draw) -> str | None:
        return ""

    def message_start(self, msg_id: str, model: str, input_tokens: int) -> bytes:
        return self.event("message_start", {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "content": [],
            "model": model, "stop_reason": None, "stop_sequence": None,
            "usage": {"cache_read_input_tokens": 0, "input_tokens": input_tokens,
                      "output_tokens": 0}}})

    def message_delta(self, stop: str | None, input_tokens: int, output_tokens: int) -> bytes:
        return self.event("message_delta", {
            "type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens}})

    def stream_error(self) -> bytes:
        # ⚠ Not captured: llama-server's error object in an Anthropic error event.
        return self.event("error", {"type": "error", "error": {
            "code": 500, "message": "Internal server error", "type": "server_error"}})

    def body(self, msg_id: str, model: str, reasoning: str | None, content: str | None,
             finish_reason: str | None, input_tokens: int, output_tokens: int,
             draw: Draw) -> bytes:
        blocks: list[dict[str, Any]] = []
        if reasoning:
            blocks.append({"type": "thinking", "thinking": reasoning, "signature": ""})
        if content:
            blocks.append({"type": "text", "text": content})
        return self.dumps({
            "id": msg_id, "type": "message", "role": "assistant", "content": blocks,
            "model": model, "stop_reason": stop_reason(finish_reason), "stop_sequence": None,
            "usage": {"cache_read_input_tokens": 0, "input_tokens": input_tokens,
                      "output_tokens": output_tokens}})

    def error_body(self, status: int, err_type: str, message: str, draw: Draw) -> bytes:
        # ⚠ llama-server's own error object, as on its chat route (not captured here).
        kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "server_error")
        return self.dumps({"error": {"code": status, "message": message, "type": kind}})


class OllamaMessages(MessagesWire):
    """Ollama (⚠ documentation only; see the module docstring)."""

    stream_headers = {"Content-Type": "text/event-stream"}  # noqa: RUF012
    json_headers = {"Content-Type": "application/json; charset=utf-8"}  # noqa: RUF012

    def dumps(self, obj: Any) -> bytes:
        return gojson.marshal(obj)

    def message_id(self, draw: Draw, request_id: str | None) -> str:
        return f"msg_{draw.hex(24)}"

    def _indexed(self, kind: str, index: int, key: str, value: dict[str, Any]) -> dict[str, Any]:
        return {"type": kind, "index": index, key: value}

    def stream_signature(self, draw: Draw) -> str | None:
        return None

    def message_start(self, msg_id: str, model: str, input_tokens: int) -> bytes:
        return self.event("message_start", {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": [], "usage": {"input_tokens": input_tokens, "output_tokens": 0}}})

    def message_delta(self, stop: str | None, input_tokens: int, output_tokens: int) -> bytes:
        delta = {"stop_reason": stop} if stop else {}
        return self.event("message_delta", {
            "type": "message_delta", "delta": delta,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens}})

    def stream_error(self) -> bytes:
        # The native error line parses as an empty chat chunk: no event, the stream ends.
        return b""

    def body(self, msg_id: str, model: str, reasoning: str | None, content: str | None,
             finish_reason: str | None, input_tokens: int, output_tokens: int,
             draw: Draw) -> bytes:
        blocks: list[dict[str, Any]] | None = None
        if reasoning:
            blocks = [{"type": "thinking", "thinking": reasoning}]
        if content:
            blocks = [*(blocks or []), {"type": "text", "text": content}]
        out: dict[str, Any] = {"id": msg_id, "type": "message", "role": "assistant",
                               "model": model, "content": blocks}
        stop = stop_reason(finish_reason)
        if stop:
            out["stop_reason"] = stop
        out["usage"] = {"input_tokens": input_tokens, "output_tokens": output_tokens}
        return gojson.encode(out)

    def error_body(self, status: int, err_type: str, message: str, draw: Draw) -> bytes:
        kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "api_error")
        return gojson.encode({"type": "error", "error": {"type": kind, "message": message},
                              "request_id": f"req_{draw.hex(24)}"})

    def count_tokens_body(self, input_tokens: int) -> bytes:
        return gojson.encode({"input_tokens": input_tokens})


class SglangMessages(MessagesWire):
    """SGLang (⚠ documentation only; see the module docstring)."""

    streams_reasoning = False
    finishes_after_error = True
    stream_headers = {"server": "uvicorn", "content-type": "text/event-stream; charset=utf-8"}  # noqa: RUF012
    json_headers = {"server": "uvicorn", "content-type": "application/json"}  # noqa: RUF012

    def message_id(self, draw: Draw, request_id: str | None) -> str:
        return f"msg_{draw.hex(32)}"

    def stream_signature(self, draw: Draw) -> str | None:
        return None

    def message_start(self, msg_id: str, model: str, input_tokens: int) -> bytes:
        return self.event("message_start", {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "content": [],
            "model": model, "usage": {"input_tokens": input_tokens, "output_tokens": 0,
                                      "cache_read_input_tokens": 0}}})

    def message_delta(self, stop: str | None, input_tokens: int, output_tokens: int) -> bytes:
        return self.event("message_delta", {
            "type": "message_delta", "delta": {"stop_reason": stop or "end_turn"},
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                      "cache_read_input_tokens": 0}})

    def stream_error(self) -> bytes:
        # The chat error line fails to parse: one error event, and the stream goes on to
        # its normal end (the caller then finishes it).
        return self.event("error", {"type": "error", "error": {
            "type": "api_error", "message": "Stream processing error"}})

    def body(self, msg_id: str, model: str, reasoning: str | None, content: str | None,
             finish_reason: str | None, input_tokens: int, output_tokens: int,
             draw: Draw) -> bytes:
        blocks: list[dict[str, Any]] = []
        if reasoning:
            blocks.append({"type": "thinking", "thinking": reasoning,
                           "signature": "dummy-signature"})
        if content:
            blocks.append({"type": "text", "text": content})
        return self.dumps({
            "id": msg_id, "type": "message", "role": "assistant",
            "content": blocks, "model": model, "stop_reason": stop_reason(finish_reason)
            or "end_turn", "usage": {"input_tokens": input_tokens,
                                     "output_tokens": output_tokens,
                                     "cache_read_input_tokens": 0}})

    def error_body(self, status: int, err_type: str, message: str, draw: Draw) -> bytes:
        kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "internal_error")
        return self.dumps({"type": "error", "error": {"type": kind, "message": message}})


MESSAGES_WIRES: dict[str, type[MessagesWire]] = {
    "vllm": VllmMessages, "llamacpp": LlamaCppMessages, "ollama": OllamaMessages,
    "sglang": SglangMessages,
}
