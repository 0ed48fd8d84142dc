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

The first attempt forwards the upstream's events unchanged; a reissue's events go
through the exchange's :class:`~sidecar.apis.messages.splice.MessagesSplicer`; for a
non-streaming client every event the client would have seen goes to its fold.

The first attempt to a streaming client, which reads nothing of a delta event but its
text, learns the bytes of the thinking and text delta events around their text
(``sidecar.apis.templates``) and reads an event of a learned shape by parsing its text
alone: the same state changes as the full path, without the event's object or the stream
events. A read that is one whole event (nearly every read at a paced load) skips the SSE
decoder as well.
"""

from __future__ import annotations

from typing import Any

import orjson

from detectors.base import CONTENT, THINKING, Channel
from sidecar.apis.messages.fold import MessageFold
from sidecar.apis.messages.splice import MessagesSplicer
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

#: Event types that change what the splicer knows of the client's view (the message,
#: its blocks); the rest (deltas, usage, pings) pass without it.
_SHAPING = frozenset({"message_start", "content_block_start", "content_block_stop"})
#: The delta types a template can stand for: where their text is, and its channel (the
#: answer's goes through the ``<think>`` splitter while no thinking block was seen).
_TEMPLATED: dict[Any, tuple[tuple[str, ...], Channel]] = {
    "thinking_delta": (("delta", "thinking"), THINKING),
    "text_delta": (("delta", "text"), CONTENT)}


class MessagesAttempt(Attempt):
    """State of one upstream request of a Messages request (one choice, index 0)."""

    def __init__(self, spec: AttemptSpec, splicer: MessagesSplicer,
                 fold: MessageFold | None, *, templates: bool = True) -> None:
        """``templates=False`` parses every event in full (to test the templates by)."""
        # Forwarded as it came: the first attempt, to a streaming client. Only then does
        # nothing read a delta event's object, so only then are templates learned. What
        # every event reads is set first (see ``Attempt.__init__``).
        self._verbatim = spec.number == 0 and fold is None
        self._fast = self._verbatim and templates
        self._decoder = SSEDecoder()
        self._templates = EventTemplates()
        super().__init__(spec)
        self.splicer = splicer
        self.fold = fold
        self._splitter = ThinkTagSplitter()
        self._saw_thinking = False
        self._prompt = 0

    # -- feeding -------------------------------------------------------------------

    def feed(self, chunk: bytes, now: float) -> bytes:
        """Process upstream bytes; return what to send to a streaming client now.
        Raises ``UpstreamProtocolError`` for bytes that are not a Messages event stream."""
        if self._fast and self.verdict is None and self._decoder.idle:
            # The common case at a paced load: ``chunk`` is one whole delta event of a
            # learned shape, forwarded as it is (see the module docstring). ``_templated``,
            # written out: this runs once per upstream read.
            templates = self._templates
            text = templates.match(chunk)
            if text is not None:
                if templates.tag is THINKING:
                    self._think(0, text, 1, now)
                elif self._saw_thinking:
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
        return client_index == 0 and not self._saw_thinking and self._splitter.in_think

    # -- internals -----------------------------------------------------------------

    def _templated(self, raw: bytes, now: float) -> bool:
        """Read the whole event ``raw`` of a first attempt to a streaming client through
        a learned template, if one fits (else False: parse it in full)."""
        templates = self._templates
        text = templates.match(raw)
        if text is None:
            return False
        if templates.tag is THINKING:  # learned after a thinking delta: one was seen
            self._think(0, text, 1, now)
        elif self._saw_thinking:
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
            try:
                self._apply(self._parse(kind, obj), now)
            except MalformedChunk as exc:
                raise UpstreamProtocolError(str(exc)) from None
            if self._verbatim:
                if kind in _SHAPING:
                    splicer.seen(obj)
                elif kind == "content_block_delta" and fast and self._templates.learning:
                    self._learn(ev.raw, data, obj)
                out.append(ev.raw)
                continue
            shown = splicer.rewrite(obj, self) if self.number else obj
            if shown is None:
                continue
            if kind in _SHAPING:
                splicer.seen(shown)
            if self.fold is not None:
                self.fold.add(shown)
            else:
                out.append(splicer.encode(shown))
        return b"".join(out)

    def _learn(self, raw: bytes, data: bytes, obj: dict[str, Any]) -> None:
        """Offer a delta event parsed in full to the templates."""
        delta = obj.get("delta")
        shape = _TEMPLATED.get(delta.get("type")) if isinstance(delta, dict) else None
        if shape is not None:
            self._templates.learn(raw, data, obj, shape[0], shape[1])

    def _answer(self, text: str) -> list[StreamEvent]:
        """The events of answer text while no thinking block was seen: through the inline
        ``<think>`` splitter, the delta's token on its first piece."""
        out: list[StreamEvent] = []
        self._splitter.deltas(0, text, 1, out)
        return out

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
                    self._saw_thinking = True
                    return [TextDelta(0, THINKING, text, 1)]
                return []
            if dtype == "text_delta":
                text = delta.get("text")
                if not isinstance(text, str) or not text:
                    return []
                if self._saw_thinking:
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
