"""One upstream attempt of Ollama's native API, watched: NDJSON bytes in, the bytes the
client sees and a verdict out (pure).

There is one choice (index 0). Every attempt hands its lines to the client:

- the first attempt forwards the upstream's lines unchanged;
- a reissue's lines carry the client's ``model`` (a fallback model stays invisible), and
  its final ``done: true`` line has the counters of every attempt summed
  (``sidecar.apis.ollama.lines.summed_final``);
- for a non-streaming client the same lines, parsed once, go to its ``Folder``.
"""

from __future__ import annotations

from typing import Any

from sidecar.apis.ollama.fold import Folder
from sidecar.apis.ollama.lines import LineKind, LineModel, line, summed_final
from sidecar.apis.ollama.splice import LineSplicer
from sidecar.codecs.ndjson import NDJSONDecoder, NDJSONError
from sidecar.core.attempt import Attempt, AttemptSpec
from sidecar.core.events import MalformedChunk
from sidecar.errors import UpstreamProtocolError


class LineAttempt(Attempt):
    """State of one native upstream request of a client request."""

    def __init__(self, kind: LineKind, spec: AttemptSpec, splicer: LineSplicer,
                 fold: Folder | None) -> None:
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
