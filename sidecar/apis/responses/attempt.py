"""One upstream attempt of an OpenAI Responses request, watched: SSE bytes in, the bytes
the client sees and a verdict out (pure).

Each event's ``data`` is one JSON object whose ``type`` names it. What is watched:

- ``response.reasoning_text.delta`` (vLLM, llama.cpp) and
  ``response.reasoning_summary_text.delta`` (Ollama): reasoning;
  ``response.output_text.delta``: the answer, through an inline ``<think>`` splitter
  while no reasoning was seen (a server without a reasoning parser, or a model that
  thinks with thinking off, writes its reasoning as text);
  ``response.function_call_arguments.delta``: a tool call. Each delta event is one
  token (the events carry no running count);
- ``response.completed`` (also ``response.incomplete`` and ``response.failed``): the
  status and the usage, and the end of the stream; an ``error`` event ends it too.

The attempt is an :class:`~sidecar.apis.sse_events.EventAttempt`; here are the Responses
tables and ``_parse``. It tells the splicer what it needs to close an item a cut leaves
open (``TELLS``): the upstream's last ``sequence_number`` and the open item's text. A
template stands for a reasoning or output text delta, its ``sequence_number`` included.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from detectors.base import CONTENT, THINKING, Channel
from sidecar.apis.responses.fold import ResponsesFold
from sidecar.apis.responses.splice import ResponsesSplicer
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

_REASONING = ("response.reasoning_text.delta", "response.reasoning_summary_text.delta")
_ENDS = ("response.completed", "response.incomplete", "response.failed")
#: The delta events a template can stand for: where their text is, and its channel (the
#: answer's goes through the ``<think>`` splitter while no reasoning was seen).
_SHAPES: dict[Any, tuple[tuple[str, ...], Channel]] = {
    "response.reasoning_text.delta": (("delta",), THINKING),
    "response.reasoning_summary_text.delta": (("delta",), THINKING),
    "response.output_text.delta": (("delta",), CONTENT)}


class ResponsesAttempt(EventAttempt):
    """State of one upstream request of a Responses request (one choice, index 0)."""

    #: Event types that change what the splicer knows of the client's view (the
    #: response, its items); deltas pass without it.
    SHAPING = frozenset({"response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added",
                         "response.output_item.done"})
    TEMPLATED = frozenset(_SHAPES)
    NUMBER_KEY = "sequence_number"
    TELLS = True

    def __init__(self, spec: AttemptSpec, splicer: ResponsesSplicer,
                 fold: ResponsesFold | None, *, templates: bool = True) -> None:
        self._kept = splicer.kept
        super().__init__(spec, splicer, fold, templates=templates)

    def _shape(self, kind: Any, obj: dict[str, Any]) -> tuple[Sequence[str], Channel] | None:
        return _SHAPES.get(kind)

    def _parse(self, kind: Any, obj: dict[str, Any]) -> list[StreamEvent]:
        """The format-neutral events of one Responses event."""
        if kind in _REASONING:
            text = obj.get("delta")
            if isinstance(text, str) and text:
                self._saw_reasoning = True
                self._kept.keep(text)
                return [TextDelta(0, THINKING, text, 1)]
            return []
        if kind == "response.output_text.delta":
            text = obj.get("delta")
            if not isinstance(text, str) or not text:
                return []
            self._kept.keep(text)
            if self._saw_reasoning:
                return [TextDelta(0, CONTENT, text, 1)]
            return self._answer(text)
        if kind == "response.function_call_arguments.delta":
            text = obj.get("delta")
            if isinstance(text, str):
                self._kept.keep(text)
            return [ToolCallDelta(0, [obj])]
        if kind == "response.output_item.added":
            self._state(0)
            return []
        if kind in _ENDS:
            response = obj.get("response")
            if not isinstance(response, dict):
                raise MalformedChunk(f"{kind} without a response object")
            events: list[StreamEvent] = []
            usage = response.get("usage")
            if isinstance(usage, dict):
                details = usage.get("output_tokens_details")
                reasoning = details.get("reasoning_tokens") if isinstance(details, dict) else None
                prompt, output = usage.get("input_tokens"), usage.get("output_tokens")
                events.append(Usage(prompt if isinstance(prompt, int) else 0,
                                    output if isinstance(output, int) else 0,
                                    reasoning if isinstance(reasoning, int) else None,
                                    final=True))
            status = response.get("status")
            events.append(Finish(0, status if isinstance(status, str) else "completed"))
            events.append(DONE)
            return events
        if kind == "error":
            message = obj.get("message")
            return [StreamError(str(message or "upstream error"), None)]
        return []
