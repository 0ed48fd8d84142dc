"""One upstream attempt of an Anthropic Messages request, watched: SSE bytes in, the bytes
the client sees and a verdict out (pure).

Each event's ``data`` is one JSON object whose ``type`` names it (the ``event:`` line
says the same and stays in the forwarded bytes). What is watched:

- ``content_block_delta`` with ``thinking_delta``: reasoning; ``text_delta``: the answer,
  through an inline ``<think>`` splitter while no thinking block was seen (a server
  without a reasoning parser, or a model that thinks with thinking off, writes its
  reasoning as text); ``input_json_delta``: a tool call. Each delta event is one token
  (the events carry no running count);
- ``message_start`` (the prompt's tokens), ``message_delta`` (the stop reason and the
  final usage: output tokens include the reasoning), ``message_stop`` (the end), and an
  ``error`` event, which ends the stream.

The attempt is an :class:`~sidecar.apis.sse_events.EventAttempt` (forwarding, splicing,
folding and the templates a first attempt reads delta events through are shared); here
are the Messages tables and ``_parse``. A template stands for a thinking or text delta.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from detectors.base import CONTENT, THINKING, Channel
from sidecar.apis.messages.fold import MessagesFold
from sidecar.apis.messages.splice import MessagesSplicer
from sidecar.apis.sse_events import EventAttempt
from sidecar.core.attempt import AttemptSpec
from sidecar.core.events import (
    DONE,
    Finish,
    MalformedChunk,
    StreamError,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    Usage,
)

#: The delta types a template can stand for: where their text is, and its channel (the
#: answer's goes through the ``<think>`` splitter while no thinking block was seen).
_SHAPES: dict[Any, tuple[tuple[str, ...], Channel]] = {
    "thinking_delta": (("delta", "thinking"), THINKING),
    "text_delta": (("delta", "text"), CONTENT)}


class MessagesAttempt(EventAttempt):
    """State of one upstream request of a Messages request (one choice, index 0)."""

    SHAPING = frozenset({"message_start", "content_block_start", "content_block_stop"})
    TEMPLATED = frozenset({"content_block_delta"})

    def __init__(self, spec: AttemptSpec, splicer: MessagesSplicer,
                 fold: MessagesFold | None, *, templates: bool = True) -> None:
        super().__init__(spec, splicer, fold, templates=templates)
        self._prompt = 0

    def _shape(self, kind: Any, obj: dict[str, Any]) -> tuple[Sequence[str], Channel] | None:
        delta = obj.get("delta")
        return _SHAPES.get(delta.get("type")) if isinstance(delta, dict) else None

    def _parse(self, kind: Any, obj: dict[str, Any]) -> list[StreamEvent]:
        """The format-neutral events of one Messages event."""
        if kind == "content_block_delta":
            delta = obj.get("delta")
            if not isinstance(delta, dict):
                raise MalformedChunk("content_block_delta without a delta object")
            dtype = delta.get("type")
            if dtype == "thinking_delta":
                text = delta.get("thinking")
                if isinstance(text, str) and text:
                    self._saw_reasoning = True
                    return [TextDelta(0, THINKING, text, 1)]
                return []
            if dtype == "text_delta":
                text = delta.get("text")
                if not isinstance(text, str) or not text:
                    return []
                if self._saw_reasoning:
                    return [TextDelta(0, CONTENT, text, 1)]
                return self._answer(text)
            if dtype == "input_json_delta":
                return [ToolCallDelta(0, [delta])]
            return []
        if kind == "message_start":
            message = obj.get("message")
            usage = message.get("usage") if isinstance(message, dict) else None
            prompt = usage.get("input_tokens") if isinstance(usage, dict) else None
            self._prompt = prompt if isinstance(prompt, int) else 0
            return [Usage(self._prompt, 0, None, final=False)]
        if kind == "message_delta":
            events: list[StreamEvent] = []
            usage = obj.get("usage")
            if isinstance(usage, dict):
                output = usage.get("output_tokens")
                prompt = usage.get("input_tokens")
                events.append(Usage(prompt if isinstance(prompt, int) else self._prompt,
                                    output if isinstance(output, int) else 0, None, final=True))
            delta = obj.get("delta")
            reason = delta.get("stop_reason") if isinstance(delta, dict) else None
            events.append(Finish(0, reason if isinstance(reason, str) else "end_turn"))
            return events
        if kind == "content_block_start":
            self._state(0)
            return []
        if kind == "message_stop":
            return [DONE]
        if kind == "error":
            err = obj.get("error")
            message = err.get("message") if isinstance(err, dict) else err
            return [StreamError(str(message or "upstream error"), None)]
        return []  # content_block_stop, ping, and types added later
