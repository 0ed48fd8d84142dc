"""One upstream attempt, watched: bytes in, bytes to forward and a verdict out (pure).

``Attempt.feed(chunk, now)`` decodes SSE, turns each event into stream events, feeds
the text of every choice to that choice's detector chain, and returns the bytes the
client should receive for this chunk:

- the first attempt forwards the upstream's original event bytes unchanged;
- a reissue's chunks are rewritten to the client's ``Head`` (id, created, model) and its
  choice indices mapped back (see ``sidecar.splice``);
- a non-streaming client gets nothing here: chunks go to the ``Aggregator`` instead.

When a detector fires and ``stop_on_verdict`` is set, the attempt stops at that event:
later events of the same chunk are dropped and ``verdict`` is set. The caller then leaves
the upstream response, which closes the connection and makes vLLM abort the request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from detectors import Chain, DetectorConfig, Verdict, default_chain
from detectors.base import THINKING, Channel
from sidecar.aggregate import Aggregator
from sidecar.codecs.sse import SSEDecoder, SSEError, SSEEvent
from sidecar.errors import UpstreamProtocolError
from sidecar.splice import DONE_EVENT, Head, event, rewrite, strip_reasoning
from sidecar.stream import (
    Done,
    Finish,
    MalformedChunk,
    Route,
    StreamError,
    StreamModel,
    TextDelta,
    ToolCallDelta,
    Usage,
)

MAX_KEPT_REASONING = 32 * 1024  # characters of reasoning kept per choice for salvage
_KEEP_JOIN = 64  # kept reasoning deltas are joined into one string this often


@dataclass(slots=True)
class ChoiceState:
    """What the sidecar knows about one choice of one attempt."""

    chain: Chain
    finished: bool = False
    thinking_tokens: int = 0
    content_tokens: int = 0
    reasoning: list[str] = field(default_factory=list)
    reasoning_chars: int = 0

    def keep_reasoning(self, text: str) -> None:
        """Keep a thinking delta for salvage, up to ``MAX_KEPT_REASONING`` characters.

        Deltas are joined every ``_KEEP_JOIN`` pieces: a string per token would cost about
        60 bytes of object overhead for 4 characters of text (about 0.5 MiB per choice at
        the cap instead of about 33 KiB)."""
        if self.reasoning_chars < MAX_KEPT_REASONING:
            kept = self.reasoning
            kept.append(text)
            self.reasoning_chars += len(text)
            if len(kept) >= _KEEP_JOIN:
                self.reasoning = ["".join(kept)]

    def reasoning_text(self) -> str:
        """The reasoning kept so far."""
        return "".join(self.reasoning)


@dataclass(frozen=True, slots=True)
class Totals:
    """Token counts of earlier attempts, added to the usage the client finally sees."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    #: Earlier attempts cut before their usage arrived; each is billed the prompt size
    #: of an attempt that reported usage (the same prompt, sent again).
    unknown_prompts: int = 0
    #: The prompt size the last attempt that reported usage had (0 while none did).
    last_prompt: int = 0

    def usage(self) -> dict[str, Any]:
        """The usage object for a response that ends without upstream usage (every
        attempt cut): all tokens generated, the prompt billed once per attempt."""
        prompt = self.prompt_tokens + self.unknown_prompts * self.last_prompt
        return {"prompt_tokens": prompt, "total_tokens": prompt + self.completion_tokens,
                "completion_tokens": self.completion_tokens,
                "completion_tokens_details": {"reasoning_tokens": self.reasoning_tokens}}


class WatchedAttempt:
    """What every watched upstream attempt keeps, whatever its wire format (SSE here,
    NDJSON in ``sidecar.ollama_attempt``): one :class:`ChoiceState` and detector chain
    per upstream choice, the first verdict, token counts, usage, errors and the end of
    the stream. Subclasses decode their bytes into stream events and pass each chunk's
    events to ``_apply``."""

    def __init__(
        self,
        *,
        number: int,
        detectors: DetectorConfig,
        started_at: float,
        head: Head | None,
        earlier: Totals,
        stop_on_verdict: bool,
        index_map: dict[int, int] | None = None,
        keep_reasoning: bool = True,
    ) -> None:
        self.number = number
        # Keep each choice's reasoning (bounded) for a salvage reissue; without salvage
        # in the ladder nothing reads it, and a long stream saves up to 32K characters.
        self.keeps_reasoning = keep_reasoning
        self.head = head
        self.index_map = index_map or {}
        self.earlier = earlier
        self.stop_on_verdict = stop_on_verdict
        self._detectors = detectors
        self._started_at = started_at
        self.choices: dict[int, ChoiceState] = {}
        self.verdict: Verdict | None = None
        self.verdict_index: int | None = None
        self.done = False
        self.error: StreamError | None = None
        self.usage: Usage | None = None
        self.counted_tokens = 0
        self.first_content_at: float | None = None

    def tick(self, now: float) -> Verdict | None:
        """No bytes arrived for a while: let clock-driven detectors (stall, wall budget) look."""
        self._tick(now)
        return self.verdict

    @property
    def stopped(self) -> bool:
        """True once a verdict should stop this attempt."""
        return self.verdict is not None and self.stop_on_verdict

    @property
    def open_choices(self) -> list[int]:
        """Client-side indices of choices that have not finished, in order."""
        return sorted(self._client_index(i) for i, c in self.choices.items() if not c.finished)

    def reasoning_of(self, index: int) -> str:
        """The (bounded) reasoning text seen for upstream choice ``index`` ("" when the
        attempt was made with ``keep_reasoning=False``)."""
        state = self.choices.get(index)
        return state.reasoning_text() if state else ""

    def totals(self) -> Totals:
        """This attempt's tokens plus the earlier ones', for the next attempt."""
        usage = self.usage
        completion = max(usage.completion_tokens if usage else 0, self.counted_tokens)
        reasoning = sum(c.thinking_tokens for c in self.choices.values())
        return Totals(
            self.earlier.prompt_tokens + (usage.prompt_tokens if usage else 0),
            self.earlier.completion_tokens + completion,
            self.earlier.reasoning_tokens + reasoning,
            self.earlier.unknown_prompts + (0 if usage else 1),
            usage.prompt_tokens if usage else self.earlier.last_prompt,
        )

    # -- internals -----------------------------------------------------------------

    def _client_index(self, index: int) -> int:
        return self.index_map.get(index, index)

    def _state(self, index: int) -> ChoiceState:
        state = self.choices.get(index)
        if state is None:
            chain = default_chain(self._detectors, started_at=self._started_at)
            state = self.choices[index] = ChoiceState(chain)
        return state

    def _tick(self, now: float) -> None:
        if self.verdict is not None:
            return
        for index, state in self.choices.items():
            if not state.finished:
                verdict = state.chain.tick(now)
                if verdict is not None:
                    self.verdict, self.verdict_index = verdict, index
                    return

    def _text(self, index: int, channel: Channel, text: str, tokens: int, now: float) -> None:
        """Count one text delta of choice ``index`` and feed it to that choice's chain
        (the first verdict stays: later deltas are counted, not judged)."""
        state = self.choices.get(index)
        if state is None:
            state = self._state(index)
        self.counted_tokens += tokens
        if channel == THINKING:
            state.thinking_tokens += tokens
            if self.keeps_reasoning:
                state.keep_reasoning(text)
        else:
            state.content_tokens += tokens
            if self.first_content_at is None:
                self.first_content_at = now
        if self.verdict is None:
            verdict = state.chain.feed(channel, text, tokens, now)
            if verdict is not None:
                self.verdict, self.verdict_index = verdict, index

    def _apply(self, parsed: list[Any], now: float) -> None:
        """Update state from one chunk's events (runs once per upstream event)."""
        for item in parsed:
            kind = type(item)  # the event types are final: an identity test is enough
            if kind is TextDelta:
                self._text(item.index, item.channel, item.text, item.tokens, now)
            elif kind is Finish:
                self._state(item.index).finished = True
            elif kind is Usage:
                # Forwarded whether or not the client asked: a server started with
                # --enable-force-include-usage sends it anyway, and so must we.
                self.usage = item
            elif kind is Done:
                self.done = True
            elif kind is StreamError:
                self.error = item
                self.done = True
            elif kind is ToolCallDelta:
                self._state(item.index)


class Attempt(WatchedAttempt):
    """State of one upstream request of a client request (the first, or a reissue)."""

    def __init__(
        self,
        *,
        route: Route,
        number: int,
        detectors: DetectorConfig,
        started_at: float,
        head: Head | None = None,
        index_map: dict[int, int] | None = None,
        reasoning_to_content: bool = False,
        aggregator: Aggregator | None = None,
        earlier: Totals = Totals(),
        stop_on_verdict: bool = True,
        hide_reasoning: bool = False,
        client_usage: bool = False,
        client_continuous_usage: bool = False,
        keep_reasoning: bool = True,
    ) -> None:
        super().__init__(number=number, detectors=detectors, started_at=started_at, head=head,
                         earlier=earlier, stop_on_verdict=stop_on_verdict, index_map=index_map,
                         keep_reasoning=keep_reasoning)
        self.route = route
        self.reasoning_to_content = reasoning_to_content
        self.aggregator = aggregator
        # The client sent include_reasoning=false: the sidecar asked for reasoning anyway
        # (it must watch it) and removes it here, as vLLM would have.
        self.hide_reasoning = hide_reasoning
        # What the client asked of usage: it decides what a rewritten reissue chunk keeps.
        self.client_usage = client_usage
        self.client_continuous_usage = client_continuous_usage
        self._decoder = SSEDecoder()
        # Forwarded verbatim (a first attempt to a streaming client that sees reasoning):
        # nothing reads the parsed chunk after its head, so the model may skip parsing
        # all of a chunk whose shape it has learned.
        self._verbatim = number == 0 and aggregator is None and not hide_reasoning
        self._model = StreamModel(route, templates=self._verbatim)

    # -- feeding -------------------------------------------------------------------

    def feed(self, chunk: bytes, now: float) -> bytes:
        """Process upstream bytes; return what to send to a streaming client now.
        Raises ``UpstreamProtocolError`` for bytes that are not an SSE stream of chunks."""
        if self._verbatim and self.verdict is None and self._decoder.idle:
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
                    self._text(template.index, THINKING, text, 1, now)
                else:
                    self._apply(model.fill(template, text), now)
                return chunk
        try:
            events = self._decoder.feed(chunk)
        except SSEError as exc:
            raise UpstreamProtocolError(str(exc)) from None
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
                    self.head = Head(chunk.get("id"), chunk.get("created"), chunk.get("model"),
                                     self.route)
                if self.aggregator is not None and self.error is None:
                    self._aggregate(chunk)
            out.append(ev.raw if verbatim else self._bytes_for(ev.raw, parsed))
        # The last chunk is not kept while the next read waits (an idle stream would hold
        # it, 0.7 KiB of dict and strings, for nothing).
        model.chunk = None
        return out[0] if len(out) == 1 else b"".join(out)

    def eof(self, now: float) -> bytes:
        """The upstream closed the body: process what the decoder still held and return
        the bytes for the client, including an unterminated trailing piece (forwarded
        verbatim by the first attempt, to stay byte-exact)."""
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
            self.aggregator.set_usage(self.summed_usage(usage) if self.number else usage)

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
            # Reissues stream with cumulative usage (see reissue._counted); the client sees
            # usage only where it asked for it, summed over all attempts.
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
        """``usage`` with the tokens of earlier attempts added (billing stays honest)."""
        out = dict(usage)
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
