"""One upstream attempt of Ollama's native API, watched: NDJSON bytes in, the bytes the
client sees and a verdict out (pure).

``LineModel`` turns each line into stream events; there is one choice (index 0). Every
attempt hands its lines to the client:

- the first attempt forwards the upstream's lines unchanged;
- a reissue's lines carry the client's ``model`` (a fallback model stays invisible), and
  its final ``done: true`` line has the counters of every attempt summed
  (``sidecar.apis.ollama.splice.summed_final``);
- for a non-streaming client the same lines, parsed once, go to its ``OllamaFold``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from detectors.base import CONTENT, THINKING
from sidecar.apis.ollama.fold import LineKind, OllamaFold
from sidecar.apis.ollama.splice import OllamaSplicer, line, summed_final
from sidecar.codecs.ndjson import NDJSONDecoder, NDJSONError
from sidecar.core.attempt import Attempt, AttemptSpec
from sidecar.core.events import (
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


class LineModel:
    """Turns the lines of one native stream into ``StreamEvent``s (choice index 0).

    ``chunk`` holds the last parsed object. Each line that carries text counts as one
    token (Ollama sends one line per generated token). Text in ``content``/``response``
    still goes through a ``<think>`` tag splitter: a model that ignores ``think: false``
    may write its reasoning there.
    """

    __slots__ = ("_splitter", "chunk", "kind", "saw_thinking")

    def __init__(self, kind: LineKind) -> None:
        self.kind = kind
        self.chunk: dict[str, Any] | None = None
        self._splitter = ThinkTagSplitter()
        self.saw_thinking = False

    def feed(self, data: bytes) -> list[StreamEvent]:
        """Parse one line. Raises ``MalformedChunk`` for anything but a JSON object."""
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise MalformedChunk(f"invalid JSON in NDJSON stream: {exc}") from None
        if not isinstance(obj, dict):
            raise MalformedChunk("NDJSON line is not a JSON object")
        self.chunk = obj
        if "error" in obj:
            return [StreamError(str(obj["error"]), None)]
        source: Mapping[str, Any] = obj
        if self.kind == "chat":
            message = obj.get("message")
            source = message if isinstance(message, dict) else {}
        text_key = "content" if self.kind == "chat" else "response"
        events: list[StreamEvent] = []
        tokens = 1
        thinking = source.get("thinking")
        if isinstance(thinking, str) and thinking:
            self.saw_thinking = True
            events.append(TextDelta(0, THINKING, thinking, tokens))
            tokens = 0
        text = source.get(text_key)
        if isinstance(text, str) and text:
            if self.saw_thinking:
                events.append(TextDelta(0, CONTENT, text, tokens))
            else:
                self._splitter.deltas(0, text, tokens, events)
        calls = source.get("tool_calls")
        if isinstance(calls, list) and calls:
            events.append(ToolCallDelta(0, calls))
        if obj.get("done") is True:
            prompt, completion = obj.get("prompt_eval_count"), obj.get("eval_count")
            events.append(Usage(prompt if isinstance(prompt, int) else 0,
                                completion if isinstance(completion, int) else 0, None,
                                final=True))
            reason = obj.get("done_reason")
            events.append(Finish(0, reason if isinstance(reason, str) else "stop"))
        return events

    def inline_open(self) -> bool:
        """Whether the text is inside an inline ``<think>`` that was not closed."""
        return not self.saw_thinking and self._splitter.in_think


class OllamaAttempt(Attempt):
    """State of one native upstream request of a client request."""

    def __init__(self, kind: LineKind, spec: AttemptSpec, splicer: OllamaSplicer,
                 fold: OllamaFold | None) -> None:
        super().__init__(spec)
        self.kind = kind
        self.splicer = splicer
        self.fold = fold
        self._exchange_started = spec.exchange_started
        self._decoder = NDJSONDecoder()
        self._model = LineModel(kind)

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

    def inline_open(self, client_index: int) -> bool:
        """Whether the answer is inside an inline ``<think>`` left open."""
        return client_index == 0 and self._model.inline_open()

    # -- internals -----------------------------------------------------------------

    def _line(self, raw: bytes, data: bytes, now: float) -> bytes:
        try:
            events = self._model.feed(data)
        except MalformedChunk as exc:
            raise UpstreamProtocolError(str(exc)) from None
        obj = self._model.chunk
        assert obj is not None
        self._model.chunk = None  # not kept while the next line is awaited
        splicer = self.splicer
        if self.number == 0 and not splicer.model_seen and "model" in obj:
            splicer.see_model(obj.get("model"))
        state = self._state(0)  # the one choice exists from the first line on
        self._apply(events, now)
        if state.finished:  # the done: true line ends the stream
            self.done = True
        if self.number > 0 and "error" not in obj:
            obj = self._rewritten(obj)
        elif self.fold is None:
            return raw
        if self.fold is not None:
            self.fold.add(obj)
            return b""
        return line(obj)

    def _rewritten(self, obj: dict[str, Any]) -> dict[str, Any]:
        """A reissue's line as the client sees it: the client's model, and on the last
        line the counters of every attempt."""
        obj["model"] = self.splicer.client_model
        if obj.get("done") is True:
            earlier = self.earlier
            obj = summed_final(
                obj, prompt_tokens=earlier.prompt_tokens,
                completion_tokens=earlier.completion_tokens,
                unknown_prompts=earlier.unknown_prompts,
                earlier_seconds=max(0.0, self._started_at - self._exchange_started))
        return obj
