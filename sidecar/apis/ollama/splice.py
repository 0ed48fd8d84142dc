"""What the sidecar writes itself into a response of Ollama's native API when it splices
(pure): the splicer of one exchange.

NDJSON has no comments, so a cut leaves no marker in a streamed body; it is logged and
counted as on the other APIs, and a non-streaming response carries the ``X-Runaway-*``
headers. A choice left inside an inline ``<think>`` gets a ``</think>`` line; the ladder's
end is one ``done: true`` line with ``done_reason: "length"`` and the counters of every
attempt; an error after output started is an ``{"error": …}`` line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from detectors import Verdict
from sidecar.apis.ollama.fold import Folder
from sidecar.apis.ollama.lines import LineKind, created_at, error_line, final_line, line, text_line
from sidecar.core.attempt import Attempt, Totals
from sidecar.core.wire import Splicer
from sidecar.errors import UpstreamError


class LineSplicer(Splicer):
    """The splicer of one ``/api/chat`` or ``/api/generate`` exchange. ``client_model`` is
    the name the client sees on every line: the first line's ``model`` (a fallback model
    stays invisible), else the request's."""

    def __init__(self, kind: LineKind, fold: Folder | None, *, model: str | None) -> None:
        super().__init__()
        self.kind = kind
        self.fold = fold
        self.client_model: Any = model
        self.model_seen = False

    def see_model(self, model: Any) -> None:
        """The first line that names a model: its name is what the client sees."""
        self.client_model = model
        self.model_seen = True

    def _out(self, obj: dict[str, Any]) -> bytes:
        if self.fold is not None:
            self.fold.add(obj)
            return b""
        return line(obj)

    def cut(self, attempt: Attempt, verdict: Verdict, action: str, number: int,
            open_choices: Sequence[int], *, wall: float) -> bytes:
        if not attempt.inline_open(0):
            return b""
        return self._out(text_line(self.kind, self.client_model, created_at(wall), "</think>"))

    def end(self, attempt: Attempt, verdict: Verdict, action: str, number: int,
            open_choices: Sequence[int], totals: Totals, *, usage: bool, elapsed: float,
            wall: float) -> bytes:
        return self._out(final_line(
            self.kind, self.client_model, created_at(wall), done_reason="length",
            prompt_tokens=totals.prompt_tokens, completion_tokens=totals.completion_tokens,
            seconds=elapsed))

    def error(self, err: UpstreamError) -> bytes:
        return error_line(str(err))
