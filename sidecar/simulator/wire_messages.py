"""Anthropic Messages API (``/v1/messages``) on the wire. Pure: values in, bytes out; ids
and signatures come from an injected :class:`Draw`.

:class:`MessagesStream` is the event state machine every server shares (one block open at
a time; a new kind of text closes it and opens the next index); a :class:`MessagesWire`
says how one server writes each event and body. This module holds vLLM's;
:mod:`~sidecar.simulator.wires_messages` the other servers'.

:class:`VllmMessages` (vLLM 0.32.0) is **verified against real bytes**
(``tests/data/captures/vllm-0.32.0-agent-apis`` and ``…-agent-apis-recorded``):
``exclude_unset`` events with ``index`` last, ``signature_delta`` (32 random hex) before a
thinking block closes and the text block opens at the next index,
``message_start`` usage from the first chunk, final usage in ``message_delta``; the
non-streaming body drops nulls (no ``stop_sequence``). The in-stream error (a lone
``event: error`` carrying pydantic's text) is rebuilt by running vLLM's own model on the
chat error line; an error before any text (``thinking.enabled`` without a reasoning
parser) does not occur here, since the simulated node always has one.
"""

from __future__ import annotations

import abc
from typing import Any, Protocol

import orjson

from sidecar.simulator.engine.generation import Channel

# vLLM 0.32.0's converter cannot parse the chat stream's error line and reports pydantic's
# text instead (rebuilt with vLLM's own ChatCompletionStreamResponse, pydantic 2.14).
_PYDANTIC_STREAM_ERROR = (
    "2 validation errors for ChatCompletionStreamResponse\nmodel\n  Field required "
    "[type=missing, input_value={'error': {'message': 'In...am': None, 'code': 500}}, "
    "input_type=dict]\n    For further information visit "
    "https://errors.pydantic.dev/2.14/v/missing\nchoices\n  Field required [type=missing, "
    "input_value={'error': {'message': 'In...am': None, 'code': 500}}, input_type=dict]\n"
    "    For further information visit https://errors.pydantic.dev/2.14/v/missing"
)
_KINDS = {Channel.REASONING: "thinking", Channel.CONTENT: "text"}
_DELTAS = {"thinking": "thinking_delta", "text": "text_delta"}


class Draw(Protocol):
    """Where the random parts of a response come from (the node's seeded generator)."""

    def hex(self, digits: int) -> str:
        """``digits`` random lowercase hex digits."""

    def alnum(self, length: int) -> str:
        """``length`` random ASCII letters and digits."""

    def number(self, below: int) -> int:
        """A random integer in ``[0, below)``."""


def sse(name: str, payload: bytes) -> bytes:
    """One named server-sent event."""
    return b"event: " + name.encode() + b"\ndata: " + payload + b"\n\n"


def stop_reason(finish_reason: str | None) -> str | None:
    """Anthropic's ``stop_reason`` for a chat finish reason (vLLM's mapping; no stop
    strings or tools in the simulated models)."""
    if finish_reason == "length":
        return "max_tokens"
    if finish_reason == "stop":
        return "end_turn"
    return None


class MessagesWire(abc.ABC):
    """How one server writes the Messages API."""

    #: Headers of a streamed answer and of a JSON body.
    stream_headers: dict[str, str]
    json_headers: dict[str, str]
    #: Whether reasoning reaches the stream as a thinking block (SGLang drops it).
    streams_reasoning = True
    #: Whether a stream goes on to its normal end after an in-stream error event (SGLang).
    finishes_after_error = False

    def dumps(self, obj: Any) -> bytes:
        return orjson.dumps(obj)

    def event(self, name: str, obj: dict[str, Any]) -> bytes:
        return sse(name, self.dumps(obj))

    @abc.abstractmethod
    def message_id(self, draw: Draw, request_id: str | None) -> str:
        """The message id (``X-Request-Id`` applies where the server honours it)."""

    @abc.abstractmethod
    def message_start(self, msg_id: str, model: str, input_tokens: int) -> bytes:
        """The first event."""

    def block_start(self, index: int, kind: str) -> bytes:
        return self.event("content_block_start", self._indexed(
            "content_block_start", index, "content_block", {"type": kind, kind: ""}))

    def block_delta(self, index: int, kind: str, text: str) -> bytes:
        return self.event("content_block_delta", self._indexed(
            "content_block_delta", index, "delta", {"type": _DELTAS[kind], kind: text}))

    def block_stop(self, index: int, kind: str, draw: Draw) -> bytes:
        """Close a block (a thinking block gets its signature first where the server
        sends one)."""
        out = b""
        signature = self.stream_signature(draw) if kind == "thinking" else None
        if signature is not None:
            out = self.event("content_block_delta", self._indexed(
                "content_block_delta", index, "delta",
                {"type": "signature_delta", "signature": signature}))
        return out + self.event("content_block_stop",
                                {"type": "content_block_stop", "index": index})

    def _indexed(self, kind: str, index: int, key: str, value: dict[str, Any]) -> dict[str, Any]:
        # vLLM (pydantic field order): the block, then ``index``.
        return {"type": kind, key: value, "index": index}

    def stream_signature(self, draw: Draw) -> str | None:
        """The ``signature_delta`` of a closing thinking block (``None``: none sent)."""
        return draw.hex(32)

    @abc.abstractmethod
    def message_delta(self, stop: str | None, input_tokens: int, output_tokens: int) -> bytes:
        """The closing ``message_delta`` with the final usage."""

    def message_stop(self) -> bytes:
        return self.event("message_stop", {"type": "message_stop"})

    @abc.abstractmethod
    def stream_error(self) -> bytes:
        """What the client gets when generation fails after the stream started."""

    @abc.abstractmethod
    def body(self, msg_id: str, model: str, reasoning: str | None, content: str | None,
             finish_reason: str | None, input_tokens: int, output_tokens: int,
             draw: Draw) -> bytes:
        """A whole non-streaming answer."""

    @abc.abstractmethod
    def error_body(self, status: int, err_type: str, message: str, draw: Draw) -> bytes:
        """An error the handler returns (before any stream)."""

    def validation_body(self, message: str, param: str, draw: Draw) -> bytes:
        """A request-model (pydantic) error: vLLM's global handler answers OpenAI-shaped;
        the other servers answer in their own shape (⚠ with vLLM's wording)."""
        return self.error_body(400, "invalid_request_error", message, draw)

    def count_tokens_body(self, input_tokens: int) -> bytes:
        return self.dumps({"input_tokens": input_tokens})


class VllmMessages(MessagesWire):
    """vLLM 0.32.0 (verified; see the module docstring)."""

    stream_headers = {"server": "uvicorn", "content-type": "text/event-stream; charset=utf-8",  # noqa: RUF012
                      "vary": "Origin"}
    json_headers = {"server": "uvicorn", "content-type": "application/json",  # noqa: RUF012
                    "vary": "Origin"}

    def message_id(self, draw: Draw, request_id: str | None) -> str:
        return f"chatcmpl-{request_id}" if request_id else f"chatcmpl-{draw.hex(16)}"

    def message_start(self, msg_id: str, model: str, input_tokens: int) -> bytes:
        return self.event("message_start", {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "content": [],
            "model": model, "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": 0}}})

    def message_delta(self, stop: str | None, input_tokens: int, output_tokens: int) -> bytes:
        return self.event("message_delta", {
            "type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens}})

    def stream_error(self) -> bytes:
        return self.event("error", {"type": "error", "error": {
            "type": "internal_error", "message": _PYDANTIC_STREAM_ERROR}})

    def body(self, msg_id: str, model: str, reasoning: str | None, content: str | None,
             finish_reason: str | None, input_tokens: int, output_tokens: int,
             draw: Draw) -> bytes:
        blocks: list[dict[str, Any]] = []
        if reasoning:
            blocks.append({"type": "thinking", "thinking": reasoning, "signature": draw.hex(32)})
        if content:
            blocks.append({"type": "text", "text": content})
        if not blocks:
            blocks.append({"type": "text", "text": ""})
        out: dict[str, Any] = {"id": msg_id, "type": "message", "role": "assistant",
                               "content": blocks, "model": model}
        stop = stop_reason(finish_reason)
        if stop is not None:
            out["stop_reason"] = stop
        out["usage"] = {"input_tokens": input_tokens, "output_tokens": output_tokens}
        return self.dumps(out)

    def error_body(self, status: int, err_type: str, message: str, draw: Draw) -> bytes:
        return self.dumps({"type": "error", "error": {"type": err_type, "message": message}})

    def validation_body(self, message: str, param: str, draw: Draw) -> bytes:
        return self.dumps({"error": {"message": message, "type": "Bad Request",
                                     "param": param, "code": 400}})

    def count_tokens_body(self, input_tokens: int) -> bytes:
        return self.dumps({"input_tokens": input_tokens,
                           "context_management": {"original_input_tokens": input_tokens}})


class MessagesStream:
    """The event sequence of one streamed message (pure state machine).

    ``start`` opens the message; each ``token`` with text may close the open block and
    open one of its own kind at the next index; ``finish`` closes the open block and
    writes ``message_delta`` and ``message_stop``; ``error`` is the failure path.
    ``leading_text`` is put before the first text delta (llama.cpp's ``"\\n\\n"`` when its
    template pre-filled an empty think block).
    """

    __slots__ = ("_draw", "_index", "_open", "_wire", "leading_text", "model", "msg_id")

    def __init__(self, wire: MessagesWire, msg_id: str, model: str, draw: Draw, *,
                 leading_text: str = "") -> None:
        self._wire = wire
        self._draw = draw
        self.msg_id = msg_id
        self.model = model
        self.leading_text = leading_text
        self._index = 0
        self._open: str | None = None

    def start(self, input_tokens: int) -> bytes:
        return self._wire.message_start(self.msg_id, self.model, input_tokens)

    def token(self, channel: Channel, text: str) -> bytes:
        kind = _KINDS.get(channel)
        if kind is None or text == "":
            return b""
        if kind == "thinking" and not self._wire.streams_reasoning:
            return b""
        out = b""
        if self._open != kind:
            out = self._close() + self._wire.block_start(self._index, kind)
            self._open = kind
        if kind == "text" and self.leading_text:
            text, self.leading_text = self.leading_text + text, ""
        return out + self._wire.block_delta(self._index, kind, text)

    def _close(self) -> bytes:
        if self._open is None:
            return b""
        out = self._wire.block_stop(self._index, self._open, self._draw)
        self._open = None
        self._index += 1
        return out

    def finish(self, finish_reason: str | None, input_tokens: int, output_tokens: int) -> bytes:
        return (self._close()
                + self._wire.message_delta(stop_reason(finish_reason), input_tokens,
                                           output_tokens)
                + self._wire.message_stop())

    def error(self) -> bytes:
        return self._wire.stream_error()
