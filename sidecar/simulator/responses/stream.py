"""The OpenAI Responses API (``/v1/responses``) as every simulated server streams it.
Pure: values in, bytes out; ids come from an injected
:class:`~sidecar.simulator.common.draw.Draw`, times are passed in.

:class:`ResponsesStream` is the item state machine the servers share (a reasoning item,
then a message item at the next ``output_index``; each closed with its ``done`` events);
a :class:`ResponsesWire` says how one server writes each event, the response object and
the non-streaming body: vLLM's in :mod:`.vllm`, the other servers' in :mod:`.servers`.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sidecar.simulator.common.draw import Draw
from sidecar.simulator.engine.generation import Channel
from sidecar.simulator.engine.job import Timings

_KINDS = {Channel.REASONING: "reasoning", Channel.CONTENT: "message"}
Event = tuple[str, dict[str, Any]]


@dataclass(frozen=True, slots=True)
class ResponseHead:
    """What every response object of one request repeats."""

    id: str
    created_at: int
    model: str
    echo: Mapping[str, Any]  # the request fields vLLM echoes (request.ResponsesJob)
    request: Mapping[str, Any] = field(default_factory=dict)  # the body as sent


@dataclass(frozen=True, slots=True)
class ResponseUsage:
    """Token counts of a finished response."""

    input_tokens: int
    output_tokens: int
    reasoning_tokens: int


@dataclass(slots=True)
class Item:
    """An output item being built: its kind, id, index and accumulated text."""

    kind: str
    id: str
    index: int
    text: str = ""


class ResponsesWire(abc.ABC):
    """How one server writes the Responses API."""

    stream_headers: dict[str, str]
    json_headers: dict[str, str]

    @abc.abstractmethod
    def response_id(self, draw: Draw, request_id: str | None) -> str:
        """The response id (vLLM takes the body's ``request_id``)."""

    @abc.abstractmethod
    def item_id(self, kind: str, draw: Draw) -> str:
        """A fresh id for a ``reasoning`` or ``message`` item."""

    @abc.abstractmethod
    def frame(self, name: str, payload: dict[str, Any], sequence: int) -> bytes:
        """One event on the wire (``sequence`` counts every event from 0)."""

    @abc.abstractmethod
    def created(self, head: ResponseHead) -> list[Event]:
        """The events sent before any output."""

    @abc.abstractmethod
    def opened(self, item: Item) -> list[Event]:
        """The events that open an item."""

    @abc.abstractmethod
    def delta(self, item: Item, text: str) -> list[Event]:
        """The event carrying one piece of an item's text."""

    @abc.abstractmethod
    def closed(self, item: Item) -> tuple[list[Event], dict[str, Any]]:
        """The events that close an item, and the item as the final output lists it."""

    @abc.abstractmethod
    def completed(self, head: ResponseHead, finish_reason: str | None,
                  output: list[dict[str, Any]], usage: ResponseUsage,
                  timings: Timings, now: int) -> list[Event]:
        """The last event."""

    @abc.abstractmethod
    def body(self, head: ResponseHead, finish_reason: str | None, reasoning: str | None,
             content: str | None, usage: ResponseUsage, draw: Draw, now: int) -> bytes:
        """A whole non-streaming answer."""

    @abc.abstractmethod
    def error_body(self, status: int, err_type: str, message: str,
                   param: str | None) -> bytes:
        """An error answered before any output."""

    def validation_body(self, message: str, param: str) -> bytes:
        """A request-model (pydantic) error."""
        return self.error_body(400, "Bad Request", message, param)

    #: Whether a failure after the stream started aborts the connection (vLLM: the
    #: exception escapes the response) or ends the body cleanly.
    aborts_on_error = False


class ResponsesStream:
    """The event sequence of one streamed response (pure state machine).

    ``start`` gives the events sent before any output; ``token`` opens (closing the
    previous one) and extends the item of its kind; ``finish`` closes the open item and
    ends with ``response.completed``. ``include_reasoning=False`` hides reasoning (vLLM's
    extra). ``leading_text`` is put before the first text (llama.cpp, see
    :class:`~sidecar.simulator.messages.stream.MessagesStream`).
    """

    __slots__ = ("_draw", "_item", "_next_index", "_sequence", "_wire", "head",
                 "include_reasoning", "leading_text", "output")

    def __init__(self, wire: ResponsesWire, head: ResponseHead, draw: Draw, *,
                 include_reasoning: bool = True, leading_text: str = "") -> None:
        self._wire = wire
        self._draw = draw
        self.head = head
        self.include_reasoning = include_reasoning
        self.leading_text = leading_text
        self._sequence = 0
        self._next_index = 0
        self._item: Item | None = None
        self.output: list[dict[str, Any]] = []

    def _emit(self, events: list[Event]) -> bytes:
        out = []
        for name, payload in events:
            out.append(self._wire.frame(name, payload, self._sequence))
            self._sequence += 1
        return b"".join(out)

    def start(self) -> bytes:
        return self._emit(self._wire.created(self.head))

    def token(self, channel: Channel, text: str) -> bytes:
        kind = _KINDS.get(channel)
        if kind is None or text == "" or (kind == "reasoning" and not self.include_reasoning):
            return b""
        out = b""
        if self._item is None or self._item.kind != kind:
            out = self._close()
            self._item = Item(kind, self._wire.item_id(kind, self._draw), self._next_index)
            out += self._emit(self._wire.opened(self._item))
        if kind == "message" and self.leading_text:
            text, self.leading_text = self.leading_text + text, ""
        self._item.text += text
        return out + self._emit(self._wire.delta(self._item, text))

    def _close(self) -> bytes:
        if self._item is None:
            return b""
        events, done = self._wire.closed(self._item)
        self.output.append(done)
        self._item = None
        self._next_index += 1
        return self._emit(events)

    def finish(self, finish_reason: str | None, usage: ResponseUsage, timings: Timings,
               now: int) -> bytes:
        out = self._close()
        return out + self._emit(self._wire.completed(self.head, finish_reason, self.output,
                                                     usage, timings, now))
