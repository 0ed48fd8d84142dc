"""One upstream attempt on Ollama's native API, watched (pure).

The NDJSON counterpart of :class:`sidecar.watch.Attempt`, with the same surface the
proxy's attempt loop and reissue ladder use (``feed``/``eof``/``tick``, ``verdict``,
``stopped``, ``done``, ``choices``, ``totals()`` …), so both APIs share that machinery.
There is one choice (index 0). Every attempt returns NDJSON bytes for the client:

- the first attempt forwards the upstream's lines unchanged;
- a reissue's lines carry the client's ``model`` (a fallback model stays invisible), and
  its final ``done: true`` line has the counters of every attempt summed
  (``sidecar.ollama.summed_final``).

A non-streaming client gets the same bytes; its sink folds them into one object.
"""

from __future__ import annotations

from typing import Any

from detectors import DetectorConfig, Verdict, default_chain
from sidecar.errors import UpstreamProtocolError
from sidecar.ndjson import NDJSONDecoder, NDJSONError
from sidecar.ollama import ChunkModel, Kind, line, summed_final
from sidecar.splice import Head
from sidecar.stream import (
    Finish,
    MalformedChunk,
    StreamError,
    TextDelta,
    Usage,
)
from sidecar.watch import ChoiceState, Totals


class OllamaAttempt:
    """State of one native upstream request of a client request."""

    def __init__(
        self,
        *,
        kind: Kind,
        number: int,
        detectors: DetectorConfig,
        started_at: float,
        exchange_started: float,
        head: Head | None = None,
        earlier: Totals | None = None,
        stop_on_verdict: bool = True,
    ) -> None:
        self.kind = kind
        self.number = number
        self.head = head
        self.earlier = earlier if earlier is not None else Totals()
        self.stop_on_verdict = stop_on_verdict
        self.index_map: dict[int, int] = {}
        self._detectors = detectors
        self._started_at = started_at
        self._exchange_started = exchange_started
        self._decoder = NDJSONDecoder()
        self._model = ChunkModel(kind)
        self.choices: dict[int, ChoiceState] = {}
        self.verdict: Verdict | None = None
        self.verdict_index: int | None = None
        self.done = False
        self.error: StreamError | None = None
        self.usage: Usage | None = None
        self.counted_tokens = 0
        self.first_content_at: float | None = None
        self.last_created_at: Any = None

    # -- feeding -------------------------------------------------------------------

    def feed(self, chunk: bytes, now: float) -> bytes:
        """Process upstream bytes; return the NDJSON bytes for the client now. Raises
        ``UpstreamProtocolError`` for bytes that are not NDJSON objects."""
        try:
            lines = self._decoder.feed(chunk)
        except NDJSONError as exc:
            raise UpstreamProtocolError(str(exc)) from None
        out: list[bytes] = []
        for item in lines:
            if self.stopped:
                break
            if not item.data.strip():
                continue
            out.append(self._line(item.raw, item.data, now))
        return b"".join(out)

    def eof(self, now: float) -> bytes:
        """The upstream closed the body: a last line without ``\\n`` still counts."""
        rest = self._decoder.close()
        if rest.strip() and not self.stopped:
            return self._line(rest, rest, now)
        return b""

    def tick(self, now: float) -> Verdict | None:
        """No bytes arrived for a while: let clock-driven detectors look."""
        state = self.choices.get(0)
        if self.verdict is None and state is not None and not state.finished:
            verdict = state.chain.tick(now)
            if verdict is not None:
                self.verdict, self.verdict_index = verdict, 0
        return self.verdict

    @property
    def stopped(self) -> bool:
        """True once a verdict should stop this attempt."""
        return self.verdict is not None and self.stop_on_verdict

    @property
    def open_choices(self) -> list[int]:
        """``[0]`` until the stream finished."""
        return [i for i, c in self.choices.items() if not c.finished]

    def inline_open(self, client_index: int) -> bool:
        """Whether the answer is inside an inline ``<think>`` left open."""
        return client_index == 0 and self._model.inline_open()

    def reasoning_of(self, index: int) -> str:
        """The (bounded) reasoning text seen."""
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
        )

    # -- internals -----------------------------------------------------------------

    def _state(self) -> ChoiceState:
        state = self.choices.get(0)
        if state is None:
            state = self.choices[0] = ChoiceState(
                default_chain(self._detectors, started_at=self._started_at))
        return state

    def _line(self, raw: bytes, data: bytes, now: float) -> bytes:
        try:
            events = self._model.feed(data)
        except MalformedChunk as exc:
            raise UpstreamProtocolError(str(exc)) from None
        obj = self._model.chunk
        assert obj is not None
        if self.head is None and "model" in obj:
            self.head = Head(None, None, obj.get("model"), "chat")
        self.last_created_at = obj.get("created_at", self.last_created_at)
        state = self._state()
        for ev in events:
            if isinstance(ev, TextDelta):
                self.counted_tokens += ev.tokens
                if ev.channel == "thinking":
                    state.thinking_tokens += ev.tokens
                    state.keep_reasoning(ev.text)
                else:
                    state.content_tokens += ev.tokens
                    if self.first_content_at is None:
                        self.first_content_at = now
                if self.verdict is None:
                    verdict = state.chain.feed(ev.channel, ev.text, ev.tokens, now)
                    if verdict is not None:
                        self.verdict, self.verdict_index = verdict, 0
            elif isinstance(ev, Usage):
                self.usage = ev
            elif isinstance(ev, Finish):
                state.finished = True
                self.done = True
            elif isinstance(ev, StreamError):
                self.error = ev
                self.done = True
        if self.number == 0 or "error" in obj:
            return raw
        if self.head is not None:
            obj["model"] = self.head.model
        if obj.get("done") is True:
            obj = summed_final(
                obj, prompt_tokens=self.earlier.prompt_tokens,
                completion_tokens=self.earlier.completion_tokens,
                unknown_prompts=self.earlier.unknown_prompts,
                earlier_seconds=max(0.0, self._started_at - self._exchange_started))
        return line(obj)
