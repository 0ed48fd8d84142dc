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

The attempt keeps the splicer told what it needs to close an item a cut leaves open: the
upstream's last ``sequence_number`` and the text of the open item.

The first attempt to a streaming client, which reads nothing of a delta event but its
text and number, learns the bytes of the reasoning and output text delta events around
their text and their ``sequence_number`` (``sidecar.apis.templates``), and reads an
event of a learned shape by parsing its text alone: the same state changes as the full
path, without the event's object or the stream events. A read that is one whole event
(nearly every read at a paced load) skips the SSE decoder as well.
"""

from __future__ import annotations

from typing import Any

import orjson

from detectors.base import CONTENT, THINKING, Channel
from sidecar.apis.responses.fold import ResponseFold
from sidecar.apis.responses.splice import ResponsesSplicer
from sidecar.apis.templates import EventTemplates
from sidecar.codecs.sse import SSEDecoder, SSEError, SSEEvent
from sidecar.core.attempt import Attempt, AttemptSpec
from sidecar.core.events import (
    DONE,
    Finish,
    MalformedChunk,
    StreamError,
    StreamEvent,
    TextDelta,
    ThinkTagSplitter,
    ToolCallDelta,
    Usage,
)
from sidecar.errors import UpstreamProtocolError

_REASONING = ("response.reasoning_text.delta", "response.reasoning_summary_text.delta")
_ENDS = ("response.completed", "response.incomplete", "response.failed")
#: Event types that change what the splicer knows of the client's view (the response,
#: its items); deltas pass without it.
SHAPING = frozenset({"response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", "response.output_item.done"})
#: The delta events a template can stand for, and the channel of their text (the
#: answer's goes through the ``<think>`` splitter while no reasoning was seen).
_TEMPLATED: dict[Any, Channel] = {"response.reasoning_text.delta": THINKING,
              "response.reasoning_summary_text.delta": THINKING,
              "response.output_text.delta": CONTENT}
_TEXT = ("delta",)


class ResponsesAttempt(Attempt):
    """State of one upstream request of a Responses request (one choice, index 0)."""

    def __init__(self, spec: AttemptSpec, splicer: ResponsesSplicer,
                 fold: ResponseFold | None, *, templates: bool = True) -> None:
        """``templates=False`` parses every event in full (to test the templates by)."""
        # Forwarded as it came: the first attempt, to a streaming client that sees its
        # reasoning (hidden reasoning makes the splicer drop items and renumber). Only
        # then does nothing read a delta event's object, so only then are templates
        # learned. What every event reads is set first (see ``Attempt.__init__``).
        self._verbatim = spec.number == 0 and fold is None and not splicer.hide
        self._fast = self._verbatim and templates
        self._decoder = SSEDecoder()
        self._templates = EventTemplates()
        self.splicer = splicer
        self._keep = splicer.keep
        super().__init__(spec)
        self.fold = fold
        self._splitter = ThinkTagSplitter()
        self._saw_reasoning = False
        self._rewritten = spec.number > 0 or splicer.hide

    # -- feeding -------------------------------------------------------------------

    def feed(self, chunk: bytes, now: float) -> bytes:
        """Process upstream bytes; return what to send to a streaming client now.
        Raises ``UpstreamProtocolError`` for bytes that are not a Responses event stream."""
        if self._fast and self.verdict is None and self._decoder.idle:
            # The common case at a paced load: ``chunk`` is one whole delta event of a
            # learned shape, forwarded as it is (see the module docstring). ``_templated``,
            # written out: this runs once per upstream read.
            templates = self._templates
            text = templates.match(chunk)
            if text is not None:
                sequence = templates.number
                if sequence is not None:
                    self.splicer.upstream_sequence = sequence
                self._keep(text)
                if templates.tag is THINKING:
                    self._think(0, text, 1, now)
                elif self._saw_reasoning:
                    self._text(0, CONTENT, text, 1, now)
                else:
                    self._apply(self._answer(text), now)
                return chunk
        try:
            events = self._decoder.feed(chunk)
        except SSEError as exc:
            raise UpstreamProtocolError(str(exc)) from None
        return self._events(events, now)

    def eof(self, now: float) -> bytes:
        """The upstream closed the body: what the decoder still held, and an unterminated
        trailing piece (forwarded verbatim by the first attempt, to stay byte-exact)."""
        events, rest = self._decoder.close()
        out = self._events(events, now)
        if self._verbatim and not self.stopped:
            out += rest
        return out

    def inline_open(self, client_index: int) -> bool:
        """Whether the answer is inside an inline ``<think>`` left open."""
        return client_index == 0 and not self._saw_reasoning and self._splitter.in_think

    # -- internals -----------------------------------------------------------------

    def _templated(self, raw: bytes, now: float) -> bool:
        """Read the whole event ``raw`` of a first attempt to a streaming client through
        a learned template, if one fits (else False: parse it in full)."""
        templates = self._templates
        text = templates.match(raw)
        if text is None:
            return False
        sequence = templates.number
        if sequence is not None:
            self.splicer.upstream_sequence = sequence
        self._keep(text)
        if templates.tag is THINKING:  # learned after a reasoning delta: one was seen
            self._think(0, text, 1, now)
        elif self._saw_reasoning:
            self._text(0, CONTENT, text, 1, now)
        else:
            self._apply(self._answer(text), now)
        return True

    def _events(self, events: list[SSEEvent], now: float) -> bytes:
        out: list[bytes] = []
        splicer = self.splicer
        fast = self._fast
        for ev in events:
            if self.verdict is not None and self.stop_on_verdict:
                break
            if fast and self._templated(ev.raw, now):  # several events in one read
                out.append(ev.raw)
                continue
            data = ev.data
            if data is None:  # a comment
                if self._verbatim:
                    out.append(ev.raw)
                self._tick(now)
                continue
            try:
                obj = orjson.loads(data)
            except orjson.JSONDecodeError as exc:
                raise UpstreamProtocolError(f"invalid JSON in stream: {exc}") from None
            if not isinstance(obj, dict):
                raise UpstreamProtocolError("stream event is not a JSON object")
            kind = obj.get("type")
            sequence = obj.get("sequence_number")
            if isinstance(sequence, int):
                splicer.upstream_sequence = sequence
            try:
                self._apply(self._parse(kind, obj), now)
            except MalformedChunk as exc:
                raise UpstreamProtocolError(str(exc)) from None
            if self._verbatim:
                if kind in SHAPING:
                    splicer.seen(obj)
                elif fast and self._templates.learning:
                    channel = _TEMPLATED.get(kind)
                    if channel is not None:
                        self._templates.learn(ev.raw, data, obj, _TEXT, channel,
                                              "sequence_number")
                out.append(ev.raw)
                continue
            shown = splicer.rewrite(obj, self) if self._rewritten else obj
            if shown is None:
                continue
            if kind in SHAPING:
                splicer.seen(shown)
            if self.fold is not None:
                self.fold.add(shown)
            else:
                out.append(splicer.encode(shown))
        return b"".join(out)

    def _answer(self, text: str) -> list[StreamEvent]:
        """The events of answer text while no reasoning was seen: through the inline
        ``<think>`` splitter, the delta's token on its first piece."""
        out: list[StreamEvent] = []
        self._splitter.deltas(0, text, 1, out)
        return out

    def _parse(self, kind: Any, obj: dict[str, Any]) -> list[StreamEvent]:
        """The format-neutral events of one Responses event."""
        if kind in _REASONING:
            text = obj.get("delta")
            if isinstance(text, str) and text:
                self._saw_reasoning = True
                self._keep(text)
                return [TextDelta(0, THINKING, text, 1)]
            return []
        if kind == "response.output_text.delta":
            text = obj.get("delta")
            if not isinstance(text, str) or not text:
                return []
            self._keep(text)
            if self._saw_reasoning:
                return [TextDelta(0, CONTENT, text, 1)]
            return self._answer(text)
        if kind == "response.function_call_arguments.delta":
            text = obj.get("delta")
            if isinstance(text, str):
                self._keep(text)
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
