"""OpenAI Responses API (``/v1/responses``) on the wire. Pure: values in, bytes out; ids
come from an injected :class:`~sidecar.simulator.wire_messages.Draw`, times are passed in.

:class:`ResponsesStream` is the item state machine the servers share (a reasoning item,
then a message item at the next ``output_index``; each closed with its ``done`` events);
a :class:`ResponsesWire` says how one server writes each event, the response object and
the non-streaming body. This module holds vLLM's; :mod:`~sidecar.simulator.wires_responses`
the other servers'.

:class:`VllmResponses` (vLLM 0.32.0) is **verified against real bytes**
(``tests/data/captures/vllm-0.32.0-agent-apis`` and ``…-agent-apis-recorded``):
``created`` and ``in_progress`` first, event keys in the openai models' (alphabetical)
order with ``type`` last, ``sequence_number`` from 0 over every event, every null written,
a reasoning item closed before the message opens at the next ``output_index``, the
reasoning item ``status: null`` in a non-streaming body, ``include_reasoning: false``
(no reasoning item, tokens still counted), ``length`` → ``status: "incomplete"`` with
``incomplete_details.reason: "max_output_tokens"`` under a ``response.completed`` event.
⚠ From vLLM's source only: the echo of function tools (openai 3.63's ``FunctionTool``
fields) and of ``text``.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from sidecar.simulator.common.draw import Draw
from sidecar.simulator.common.sse import sse
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
    echo: Mapping[str, Any]  # the request fields vLLM echoes (agent_requests.ResponsesJob)
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


# ------------------------------------------------------------------------------ vLLM


def _vllm_usage(usage: ResponseUsage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0,
                                 "input_tokens_per_turn": [], "cached_tokens_per_turn": []},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens,
                                  "tool_output_tokens": 0, "output_tokens_per_turn": [],
                                  "tool_output_tokens_per_turn": []},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


class VllmResponses(ResponsesWire):
    """vLLM 0.32.0 (verified; see the module docstring)."""

    stream_headers = {"server": "uvicorn", "content-type": "text/event-stream; charset=utf-8",  # noqa: RUF012
                      "vary": "Origin"}
    json_headers = {"server": "uvicorn", "content-type": "application/json",  # noqa: RUF012
                    "vary": "Origin"}
    aborts_on_error = True

    def response_id(self, draw: Draw, request_id: str | None) -> str:
        return request_id if request_id is not None else f"resp_{draw.hex(16)}"

    def item_id(self, kind: str, draw: Draw) -> str:
        return f"{'rs' if kind == 'reasoning' else 'msg'}_{draw.hex(16)}"

    def frame(self, name: str, payload: dict[str, Any], sequence: int) -> bytes:
        # The openai event models list their fields alphabetically; ``type`` sorts last.
        event = dict(sorted({**payload, "sequence_number": sequence, "type": name}.items()))
        return sse(name, orjson.dumps(event))

    def response(self, head: ResponseHead, status: str, output: list[dict[str, Any]],
                 usage: ResponseUsage | None) -> dict[str, Any]:
        """The response object in ``ResponsesResponse``'s field order."""
        e = head.echo
        return {
            "id": head.id, "created_at": head.created_at,
            "incomplete_details": {"reason": "max_output_tokens"}
            if status == "incomplete" else None,
            "instructions": e.get("instructions"), "metadata": e.get("metadata"),
            "model": head.model, "object": "response", "output": output,
            "parallel_tool_calls": e.get("parallel_tool_calls", True),
            "temperature": e.get("temperature", 1.0), "tool_choice": e.get("tool_choice", "none"),
            "tools": e.get("tools", []), "top_p": e.get("top_p", 1.0),
            "background": e.get("background", False),
            "max_output_tokens": e.get("max_output_tokens"),
            "max_tool_calls": e.get("max_tool_calls"), "previous_response_id": None,
            "prompt": None, "reasoning": e.get("reasoning"),
            "service_tier": e.get("service_tier", "auto"), "status": status,
            "text": e.get("text"), "top_logprobs": e.get("top_logprobs"),
            "truncation": e.get("truncation", "disabled"),
            "usage": None if usage is None else _vllm_usage(usage), "user": e.get("user"),
            "presence_penalty": e.get("presence_penalty", 0.0),
            "frequency_penalty": e.get("frequency_penalty", 0.0),
            "kv_transfer_params": None, "ec_transfer_params": None,
            "input_messages": None, "output_messages": None,
        }

    def created(self, head: ResponseHead) -> list[Event]:
        start = self.response(head, "in_progress", [], None)
        return [("response.created", {"response": start}),
                ("response.in_progress", {"response": start})]

    def opened(self, item: Item) -> list[Event]:
        where = {"item_id": item.id, "output_index": item.index, "content_index": 0}
        if item.kind == "reasoning":
            return [
                ("response.output_item.added", {"item": {
                    "id": item.id, "summary": [], "type": "reasoning", "content": None,
                    "encrypted_content": None, "status": "in_progress"},
                    "output_index": item.index}),
                ("response.content_part.added",
                 {**where, "part": {"text": "", "type": "reasoning_text"}}),
            ]
        return [
            ("response.output_item.added", {"item": {
                "id": item.id, "content": [], "role": "assistant", "status": "in_progress",
                "type": "message", "phase": None}, "output_index": item.index}),
            ("response.content_part.added", {**where, "part": {
                "annotations": [], "text": "", "type": "output_text", "logprobs": []}}),
        ]

    def delta(self, item: Item, text: str) -> list[Event]:
        where = {"item_id": item.id, "output_index": item.index, "content_index": 0}
        if item.kind == "reasoning":
            return [("response.reasoning_text.delta", {**where, "delta": text})]
        return [("response.output_text.delta", {**where, "delta": text, "logprobs": []})]

    def closed(self, item: Item) -> tuple[list[Event], dict[str, Any]]:
        where = {"item_id": item.id, "output_index": item.index, "content_index": 0}
        if item.kind == "reasoning":
            part: dict[str, Any] = {"text": item.text, "type": "reasoning_text"}
            done = {"id": item.id, "summary": [], "type": "reasoning", "content": [part],
                    "encrypted_content": None, "status": "completed"}
            return [("response.reasoning_text.done", {**where, "text": item.text}),
                    ("response.content_part.done", {**where, "part": part}),
                    ("response.output_item.done", {"item": done, "output_index": item.index})
                    ], done
        part = {"annotations": [], "text": item.text, "type": "output_text", "logprobs": None}
        done = {"id": item.id, "content": [part] if item.text else [], "role": "assistant",
                "status": "completed", "type": "message", "phase": None}
        return [("response.output_text.done", {**where, "text": item.text, "logprobs": []}),
                ("response.content_part.done", {**where, "part": part}),
                ("response.output_item.done", {"item": done, "output_index": item.index})
                ], done

    @staticmethod
    def _status(finish_reason: str | None) -> str:
        return "incomplete" if finish_reason == "length" else "completed"

    def completed(self, head: ResponseHead, finish_reason: str | None,
                  output: list[dict[str, Any]], usage: ResponseUsage,
                  timings: Timings, now: int) -> list[Event]:
        final = self.response(head, self._status(finish_reason), output, usage)
        return [("response.completed", {"response": final})]

    def body(self, head: ResponseHead, finish_reason: str | None, reasoning: str | None,
             content: str | None, usage: ResponseUsage, draw: Draw, now: int) -> bytes:
        output: list[dict[str, Any]] = []
        if reasoning:
            output.append({"id": self.item_id("reasoning", draw), "summary": [],
                           "type": "reasoning",
                           "content": [{"text": reasoning, "type": "reasoning_text"}],
                           "encrypted_content": None, "status": None})
        if content:
            output.append({"id": self.item_id("message", draw), "content": [{
                "annotations": [], "text": content, "type": "output_text", "logprobs": None}],
                "role": "assistant", "status": "completed", "type": "message", "phase": None})
        return orjson.dumps(self.response(head, self._status(finish_reason), output, usage))

    def error_body(self, status: int, err_type: str, message: str,
                   param: str | None) -> bytes:
        return orjson.dumps({"error": {"message": message, "type": err_type, "param": param,
                                       "code": status}})


class ResponsesStream:
    """The event sequence of one streamed response (pure state machine).

    ``start`` gives the events sent before any output; ``token`` opens (closing the
    previous one) and extends the item of its kind; ``finish`` closes the open item and
    ends with ``response.completed``. ``include_reasoning=False`` hides reasoning (vLLM's
    extra). ``leading_text`` is put before the first text (llama.cpp, see
    :class:`~sidecar.simulator.wire_messages.MessagesStream`).
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
