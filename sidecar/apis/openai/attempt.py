"""One upstream attempt of an OpenAI chat-completions or completions request, watched:
SSE bytes in, the bytes the client sees and a verdict out (pure).

``OpenAIAttempt.feed(chunk, now)`` decodes SSE, turns each event into stream events, feeds
the text of every choice to that choice's detector chain (``sidecar.core.attempt``), and
returns the bytes the client should receive for this chunk:

- the first attempt forwards the upstream's original event bytes unchanged;
- a reissue's chunks are rewritten to the client's ``Head`` (id, created, model) and its
  choice indices mapped back (``sidecar.apis.openai.splice``);
- a non-streaming client gets nothing here: chunks go to its ``OpenAIFold`` instead.
"""

from __future__ import annotations

from typing import Any

from detectors.base import THINKING
from sidecar.apis.openai.chunks import ChunkKind, StreamModel
from sidecar.apis.openai.fold import OpenAIFold
from sidecar.apis.openai.splice import (
    DONE_EVENT,
    Head,
    OpenAISplicer,
    event,
    rewrite,
    strip_reasoning,
)
from sidecar.codecs.sse import SSEDecoder, SSEError, SSEEvent
from sidecar.core.attempt import Attempt, AttemptSpec
from sidecar.core.events import Done, MalformedChunk, TextDelta
from sidecar.core.wire import RequestFacts
from sidecar.errors import UpstreamProtocolError


class OpenAIAttempt(Attempt):
    """State of one upstream request of a chat-completions or completions request."""

    def __init__(self, kind: ChunkKind, spec: AttemptSpec, facts: RequestFacts,
                 splicer: OpenAISplicer, fold: OpenAIFold | None) -> None:
        # Forwarded verbatim (a first attempt to a streaming client that sees reasoning):
        # nothing reads the parsed chunk after its head, so the model may skip parsing
        # all of a chunk whose shape it has learned. What every event reads is set first
        # (see ``Attempt.__init__``).
        self._verbatim = spec.number == 0 and fold is None and not facts.hide_reasoning
        # ``_decoder.idle`` as of its last feed, read here: the decoder is one object less
        # to fetch from memory per event.
        self._idle = True
        self._decoder = SSEDecoder()
        self._model = StreamModel(kind, templates=self._verbatim)
        super().__init__(spec)
        self.kind = kind
        self.splicer = splicer
        #: The client's response identity: the splicer's, once the first chunk set it.
        self.head: Head | None = splicer.head
        # After a salvage prefill vLLM labels the answer as reasoning: it is the answer.
        self.reasoning_to_content = spec.step == "salvage"
        self.aggregator = fold
        # The client sent include_reasoning=false: the sidecar asked for reasoning anyway
        # (it must watch it) and removes it here, as vLLM would have.
        self.hide_reasoning = facts.hide_reasoning
        # What the client asked of usage: it decides what a rewritten reissue chunk keeps.
        self.client_usage = facts.usage
        self.client_continuous_usage = facts.continuous_usage

    # -- feeding -------------------------------------------------------------------

    def feed(self, chunk: bytes, now: float) -> bytes:
        """Process upstream bytes; return what to send to a streaming client now.
        Raises ``UpstreamProtocolError`` for bytes that are not an SSE stream of chunks."""
        if self._verbatim and self.verdict is None and self._idle:
            # The common case at a paced load, in the fewest steps: ``chunk`` is one whole
            # event whose payload has a learned shape, forwarded as it is. The same state
            # changes as the general path below; only its lists and event objects are gone.
            model = self._model
            hit = model.match_event(chunk)
            if hit is not None:
                template, text = hit
                # ``fill`` of a reasoning template would only wrap the text: its choice
                # saw reasoning already (the template was learned from such a chunk).
                if template.channel is THINKING:
                    if template.index == 0 and self._hold(text, now):
                        return chunk
                    self._think(template.index, text, 1, now)
                else:
                    self._apply(model.fill(template, text), now)
                return chunk
        decoder = self._decoder
        try:
            events = decoder.feed(chunk)
        except SSEError as exc:
            raise UpstreamProtocolError(str(exc)) from None
        self._idle = decoder.idle
        return self._events(events, now)

    def _events(self, events: list[SSEEvent], now: float) -> bytes:
        # Runs once per upstream read: the common case (a first attempt to a streaming
        # client) forwards each event's original bytes without asking ``_bytes_for``.
        verbatim = self._verbatim
        model = self._model
        out: list[bytes] = []
        for ev in events:
            if self.verdict is not None and self.stop_on_verdict:  # ``stopped``, inlined
                break
            data = ev.data
            if data is None:  # a comment, e.g. ": keep-alive"
                if self.head is None or self.number == 0:
                    out.append(ev.raw)
                self._tick(now)
                continue
            try:
                parsed = model.feed(data)
            except MalformedChunk as exc:
                raise UpstreamProtocolError(str(exc)) from None
            self._apply(parsed, now)
            chunk = model.chunk
            if chunk is not None:
                if self.head is None and "id" in chunk:
                    self.head = self.splicer.head = Head(
                        chunk.get("id"), chunk.get("created"), chunk.get("model"), self.kind)
                if self.aggregator is not None and self.error is None:
                    self._aggregate(chunk)
            out.append(ev.raw if verbatim else self._bytes_for(ev.raw, parsed))
        # The last chunk is not kept while the next read waits (an idle stream would hold
        # it for nothing).
        model.chunk = None
        return out[0] if len(out) == 1 else b"".join(out)

    def eof(self, now: float) -> bytes:
        """The upstream closed the body: process what the decoder still held and return
        the bytes for the client, including an unterminated trailing piece (forwarded
        verbatim by the first attempt, to stay byte-exact)."""
        self.settle()
        events, rest = self._decoder.close()
        out = self._events(events, now)
        if self.number == 0 and self.aggregator is None and not self.stopped:
            out += rest
        return out

    def inline_open(self, client_index: int) -> bool:
        """Whether the choice's content is inside an inline ``<think>`` left open."""
        for index in self.choices:
            if self._client_index(index) == client_index:
                return self._model.inline_open(index)
        return False

    # -- internals -----------------------------------------------------------------

    def _aggregate(self, chunk: dict[str, Any]) -> None:
        """Fold a chunk into the non-streaming client's response."""
        assert self.aggregator is not None
        self.aggregator.add(chunk, index_map=self.index_map)
        usage = chunk.get("usage")
        if isinstance(usage, dict) and not chunk.get("choices"):
            summed = self.number or (self.usage is not None and self.usage.reports > 1)
            self.aggregator.set_usage(self.summed_usage(usage) if summed else usage)

    def _bytes_for(self, raw: bytes, parsed: list[Any]) -> bytes:
        if self.aggregator is not None:
            return b""
        chunk = self._model.chunk
        if self.hide_reasoning and chunk is not None and any(
                isinstance(p, TextDelta) and p.channel == "thinking" for p in parsed):
            stripped = strip_reasoning(chunk)
            if stripped is None:
                return b""
            if self.number == 0:
                return event(stripped)
        if self.number == 0:
            return raw
        if chunk is None:
            return DONE_EVENT if any(isinstance(p, Done) for p in parsed) else raw
        if self.head is None or "error" in chunk:
            return raw
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            # Reissues stream with cumulative usage (see ``api.no_think_body``); the client
            # sees usage only where it asked for it, summed over all attempts.
            if chunk.get("choices"):
                if self.client_continuous_usage:
                    chunk["usage"] = self.summed_usage(usage)
                else:
                    del chunk["usage"]
            elif not self.client_usage:
                return b""
            else:
                chunk["usage"] = self.summed_usage(usage)
        rewritten = rewrite(self.head, chunk, self.index_map,
                            reasoning_to_content=self.reasoning_to_content)
        return event(rewritten) if rewritten is not None else b""

    def summed_usage(self, usage: dict[str, Any]) -> dict[str, Any]:
        """``usage`` with the tokens of earlier attempts added (billing stays honest); a
        final usage counts every choice's report so far (llama.cpp sends one per choice)."""
        out = dict(usage)
        own = self.usage  # (this chunk's, read already)
        if own is not None and own.final:  # summed over the choices' own reports
            prompt, completion = _count(own.prompt_tokens), _count(own.completion_tokens)
        else:
            prompt = _count(out.get("prompt_tokens"))
            completion = _count(out.get("completion_tokens"))
        earlier = self.earlier
        out["prompt_tokens"] = prompt + earlier.prompt_tokens + earlier.unknown_prompts * prompt
        out["completion_tokens"] = completion + earlier.completion_tokens
        out["total_tokens"] = out["prompt_tokens"] + out["completion_tokens"]
        details = out.get("completion_tokens_details")
        if isinstance(details, dict) and isinstance(details.get("reasoning_tokens"), int):
            details = dict(details)
            details["reasoning_tokens"] += self.earlier.reasoning_tokens
            out["completion_tokens_details"] = details
        return out


def _count(value: Any) -> int:
    """A token count from upstream usage; anything but a plausible count (a non-negative
    integer below 2**53) reads as 0, so odd usage cannot break the spliced stream."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53:
        return value
    return 0
