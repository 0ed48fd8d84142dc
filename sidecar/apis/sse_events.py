"""The skeleton shared by the APIs that stream SSE named events, one JSON object each whose
``type`` names it (Anthropic Messages, OpenAI Responses), pure.

Such an API's package holds only what is its own: which events carry text and which
shape the client's view (its attempt's tables and ``_parse``), how its splicer closes and
renumbers, its fold and its request bodies. What is the same is here:

- :class:`EventApi`: the bodies sent upstream (a non-streaming request is sent as a
  stream; a reissue is the thinking-off body, on the fallback model for
  ``fallback:MODEL``);
- :class:`EventAttempt`: one upstream attempt. It decodes the SSE, reads the delta events
  of a first attempt to a streaming client through learned templates
  (``sidecar.apis.templates``), forwards that attempt's bytes as they came, and sends a
  reissue's events (or every event of a non-streaming client) through the splicer and
  the fold;
- :class:`EventSplicer`: the splicer's common part, the bytes of its own events;
- :class:`EventFold`: a fold fed event objects.

The first attempt to a streaming client reads nothing of a delta event but its text (and
number), so it learns the bytes of the API's text delta events around those values
(``sidecar.apis.templates``) and reads an event of a learned shape by parsing its text
alone: the same state changes as the full path, without the event's object or the stream
events. A read that is one whole event (nearly every read at a paced load) skips the SSE
decoder as well.

The per-event path stays flat: an API's hooks are class-level tables and one ``_parse``
per event parsed in full, so that sharing adds no call per event (only the test of
``TELLS``, three bytecodes).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import orjson

from detectors.base import CONTENT, THINKING, Channel
from sidecar.apis.templates import EventTemplates
from sidecar.codecs.sse import SSEDecoder, SSEError, SSEEvent
from sidecar.config import ThinkingOffRule
from sidecar.core.attempt import Attempt, AttemptSpec
from sidecar.core.events import MalformedChunk, StreamEvent, ThinkTagSplitter
from sidecar.core.kept import KeptText
from sidecar.core.wire import Fold, RequestFacts, Splicer, WireApi
from sidecar.errors import UpstreamProtocolError


class EventApi(WireApi):
    """An API whose upstream stream is SSE named events. It has no salvage step: neither
    Messages nor Responses has a way to continue a message or a response."""

    stream_type = "text/event-stream"

    def first_body(self, body: Mapping[str, Any], facts: RequestFacts) -> dict[str, Any] | None:
        return None if facts.client_stream else {**body, "stream": True}

    def reissue_body(self, body: Mapping[str, Any], step: str, facts: RequestFacts, *,
                     rules: Sequence[ThinkingOffRule], open_choices: int,
                     reasoning: str = "") -> dict[str, Any]:
        out = dict(body)
        if step.startswith("fallback:"):
            out["model"] = step.split(":", 1)[1]
        out = self.thinking_off(out, rules)
        out["stream"] = True
        return out


def encode(obj: dict[str, Any]) -> bytes:
    """One named SSE event for an event object (its ``type`` names it)."""
    return b"event: " + str(obj.get("type")).encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n"


class EventFold(Fold):
    """The body of a non-streaming client, fed every event object it would have seen."""

    @abc.abstractmethod
    def add(self, obj: dict[str, Any]) -> None:
        """Fold one event in."""


class EventSplicer(Splicer):
    """What every SSE-event splicer does: tell its own events to ``seen`` and write them to
    the client (or the fold). ``seen`` is fed every event the client gets that shapes its
    view (the attempt's ``SHAPING`` types); ``rewrite`` is given a reissue's events."""

    #: The client asked not to see reasoning: the splicer drops it from every attempt, so
    #: no attempt is forwarded as it came.
    hide: bool = False

    def __init__(self, fold: EventFold | None, *, request_id: str, model: str | None) -> None:
        super().__init__()
        self.fold = fold
        self._request_id = request_id
        self._model = model

    @abc.abstractmethod
    def seen(self, obj: dict[str, Any]) -> None:
        """An event the client got (an attempt's, or the sidecar's own)."""

    @abc.abstractmethod
    def rewrite(self, obj: dict[str, Any], attempt: Attempt) -> dict[str, Any] | None:
        """A reissue's event as the client sees it, or None to drop it."""

    def encode(self, obj: dict[str, Any]) -> bytes:
        """The bytes of one event for a streaming client."""
        return encode(obj)

    def _stamp(self, obj: dict[str, Any]) -> None:
        """Make the sidecar's own event ``obj`` the client's next (a numbering API numbers
        it here)."""

    def _emit(self, objs: list[dict[str, Any]], marker: bytes) -> bytes:
        """The sidecar's own events ``objs``, after the comment ``marker``."""
        for obj in objs:
            self._stamp(obj)
            self.seen(obj)
        if self.fold is not None:
            for obj in objs:
                self.fold.add(obj)
            return b""
        return marker + b"".join(encode(obj) for obj in objs)


class EventAttempt(Attempt):
    """State of one upstream request of an SSE-event API request (one choice, index 0).

    A subclass gives its tables and ``_parse``. Reasoning seen (``_saw_reasoning``) sends
    the answer's text past the inline ``<think>`` splitter: a server that splits reasoning
    out does not also tag it inline."""

    #: Event types that change what the splicer knows of the client's view; the rest
    #: (deltas, usage, pings) pass without it.
    SHAPING: ClassVar[frozenset[str]]
    #: Event types whose events a template may stand for (see ``_shape``).
    TEMPLATED: ClassVar[frozenset[str]]
    #: The top-level key of the number every event carries, which a template reads too
    #: ("": the events are not numbered).
    NUMBER_KEY: ClassVar[str] = ""
    #: The splicer closes an item a cut leaves open with the upstream's last number and
    #: the item's text: the attempt keeps every ``NUMBER_KEY`` it reads
    #: (``upstream_sequence``, its own: the splicer reads it from the attempt it closes)
    #: and tells it every text delta (``_kept``).
    TELLS: ClassVar[bool] = False

    #: Where ``TELLS``: the splicer's keeper of the open item's text (set by the subclass),
    #: held itself, not its bound ``keep``: the compiled build calls its method directly.
    _kept: KeptText

    def __init__(self, spec: AttemptSpec, splicer: EventSplicer, fold: EventFold | None, *,
                 templates: bool = True) -> None:
        """``templates=False`` parses every event in full (to test the templates by)."""
        # Forwarded as it came: the first attempt, to a streaming client that sees its
        # reasoning. Only then does nothing read a delta event's object, so only then are
        # templates learned. What every event reads is set first (see
        # ``Attempt.__init__``).
        self._verbatim = spec.number == 0 and fold is None and not splicer.hide
        self._fast = self._verbatim and templates
        self._tells = self.TELLS
        # ``_decoder.idle`` as of its last feed, read here: the decoder is one object less
        # to fetch from memory per event.
        self._idle = True
        #: Where ``TELLS``: the last ``NUMBER_KEY`` the upstream sent (None before one).
        self.upstream_sequence: int | None = None
        self._decoder = SSEDecoder()
        self._templates = EventTemplates()
        self.splicer = splicer
        super().__init__(spec)
        self.fold = fold
        self._splitter = ThinkTagSplitter()
        self._saw_reasoning = False
        self._rewritten = spec.number > 0 or splicer.hide

    # -- the API's part --------------------------------------------------------------

    @abc.abstractmethod
    def _parse(self, kind: Any, obj: dict[str, Any]) -> list[StreamEvent]:
        """The format-neutral events of one event object of type ``kind``. Raises
        ``MalformedChunk`` for an event of a known type without its fields."""

    @abc.abstractmethod
    def _shape(self, kind: Any, obj: dict[str, Any]) -> tuple[Sequence[str], Channel] | None:
        """Where a ``TEMPLATED`` event's text is and its channel, or None when a template
        cannot stand for it."""

    # -- feeding -------------------------------------------------------------------

    def feed(self, chunk: bytes, now: float) -> bytes:
        """Process upstream bytes; return what to send to a streaming client now.
        Raises ``UpstreamProtocolError`` for bytes that are not this API's event stream."""
        if self._fast and self.verdict is None and self._idle:
            # The common case at a paced load: ``chunk`` is one whole delta event of a
            # learned shape, forwarded as it is (see the module docstring). ``_templated``,
            # written out: this runs once per upstream read.
            templates = self._templates
            text = templates.match(chunk)
            if text is not None:
                if self._tells:
                    sequence = templates.number
                    if sequence is not None:
                        self.upstream_sequence = sequence
                if templates.tag is THINKING:
                    if self._hold(text, now):
                        return chunk
                    if self._tells:
                        self._keep(text)
                    self._think(0, text, 1, now)
                    return chunk
                if self._tells:
                    self._keep(text)
                if self._saw_reasoning:
                    self._text(0, CONTENT, text, 1, now)
                else:
                    self._apply(self._answer(text), now)
                return chunk
        decoder = self._decoder
        try:
            events = decoder.feed(chunk)
        except SSEError as exc:
            raise UpstreamProtocolError(str(exc)) from None
        self._idle = decoder.idle
        return self._events(events, now)

    def eof(self, now: float) -> bytes:
        """The upstream closed the body: what the decoder still held, and an unterminated
        trailing piece (forwarded verbatim by the first attempt, to stay byte-exact)."""
        self.settle()
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
        if self._tells:
            sequence = templates.number
            if sequence is not None:
                self.upstream_sequence = sequence
        if templates.tag is THINKING:  # learned after a reasoning delta: one was seen
            if self._hold(text, now):
                return True
            if self._tells:
                self._keep(text)
            self._think(0, text, 1, now)
            return True
        if self._tells:
            self._keep(text)
        if self._saw_reasoning:
            self._text(0, CONTENT, text, 1, now)
        else:
            self._apply(self._answer(text), now)
        return True

    def _keep(self, text: str) -> None:
        """Tell the splicer a text delta of the open item (after the held ones)."""
        if self._held:
            self._settle()
        self._kept.keep(text)

    def _settled(self, texts: list[str], joined: str) -> None:
        if self._tells:
            self._kept.keep_all(texts, joined)

    def _events(self, events: list[SSEEvent], now: float) -> bytes:
        out: list[bytes] = []
        splicer = self.splicer
        fast = self._fast
        shaping = self.SHAPING
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
            self.settle()  # before ``_parse`` tells the splicer the event's text
            if self._tells:
                sequence = obj.get(self.NUMBER_KEY)
                if isinstance(sequence, int):
                    self.upstream_sequence = sequence
            try:
                self._apply(self._parse(kind, obj), now)
            except MalformedChunk as exc:
                raise UpstreamProtocolError(str(exc)) from None
            if self._verbatim:
                if kind in shaping:
                    splicer.seen(obj)
                elif fast and kind in self.TEMPLATED and self._templates.learning:
                    shape = self._shape(kind, obj)
                    if shape is not None:
                        self._templates.learn(ev.raw, data, obj, shape[0], shape[1],
                                              self.NUMBER_KEY or None)
                out.append(ev.raw)
                continue
            shown = splicer.rewrite(obj, self) if self._rewritten else obj
            if shown is None:
                continue
            if kind in shaping:
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


def content_text(content: Any) -> str:
    """The text of a message's or input item's ``content``: a string, or the text of its
    blocks (parts) joined by newlines."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b["text"] for b in content
                         if isinstance(b, Mapping) and isinstance(b.get("text"), str))
    return ""


def kwargs_thinking(body: Mapping[str, Any]) -> bool | None:
    """The thinking switch of vLLM's ``chat_template_kwargs`` in ``body``, if set."""
    kwargs = body.get("chat_template_kwargs")
    if isinstance(kwargs, Mapping):
        for key in ("enable_thinking", "thinking"):
            if isinstance(kwargs.get(key), bool):
                return bool(kwargs[key])
    return None


def token_count(value: Any) -> int:
    """A usage field's count: a plain non-negative integer below 2**53, else 0."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53:
        return value
    return 0
