"""One upstream attempt on Ollama's native API, watched (pure).

The NDJSON counterpart of :class:`sidecar.watch.Attempt`, with the same surface the
proxy's attempt loop and reissue ladder use (``feed``/``eof``/``tick``, ``verdict``,
``stopped``, ``done``, ``choices``, ``totals()`` …), so both APIs share that machinery;
the bookkeeping behind it is :class:`sidecar.watch.WatchedAttempt`'s.
There is one choice (index 0). Every attempt returns NDJSON bytes for the client:

- the first attempt forwards the upstream's lines unchanged;
- a reissue's lines carry the client's ``model`` (a fallback model stays invisible), and
  its final ``done: true`` line has the counters of every attempt summed
  (``sidecar.ollama.summed_final``).

A non-streaming client gets the same bytes; its sink folds them into one object.
"""

from __future__ import annotations

from typing import Any

from detectors import DetectorConfig
from sidecar.codecs.ndjson import NDJSONDecoder, NDJSONError
from sidecar.errors import UpstreamProtocolError
from sidecar.ollama import ChunkModel, Kind, line, summed_final
from sidecar.splice import Head
from sidecar.stream import MalformedChunk
from sidecar.watch import Totals, WatchedAttempt


class OllamaAttempt(WatchedAttempt):
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
        super().__init__(number=number, detectors=detectors, started_at=started_at, head=head,
                         earlier=earlier if earlier is not None else Totals(),
                         stop_on_verdict=stop_on_verdict,
                         keep_reasoning=False)  # the native API has no salvage step
        self.kind = kind
        self._exchange_started = exchange_started
        self._decoder = NDJSONDecoder()
        self._model = ChunkModel(kind)
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
        if self.head is None and "model" in obj:
            self.head = Head(None, None, obj.get("model"), "chat")
        self.last_created_at = obj.get("created_at", self.last_created_at)
        state = self._state(0)  # the one choice exists from the first line on
        self._apply(events, now)
        if state.finished:  # the done: true line ends the stream
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
