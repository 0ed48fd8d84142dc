"""The Anthropic Messages API (``/v1/messages``) as every simulated server streams it.
Pure: values in, bytes out; ids and signatures come from an injected
:class:`~sidecar.simulator.common.draw.Draw`.

:class:`MessagesStream` is the event state machine every server shares (one block open at
a time; a new kind of text closes it and opens the next index); a :class:`MessagesWire`
says how one server writes each event and body: vLLM's in :mod:`.vllm`, the other
servers' in :mod:`.servers`.
"""

from __future__ import annotations

import abc
from typing import Any

import orjson

from sidecar.simulator.common.draw import Draw
from sidecar.simulator.common.sse import sse
from sidecar.simulator.engine.generation import Channel

_KINDS = {Channel.REASONING: "thinking", Channel.CONTENT: "text"}
_DELTAS = {"thinking": "thinking_delta", "text": "text_delta"}


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
