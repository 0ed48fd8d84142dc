"""What the sidecar writes itself into a response of Ollama's native API when it splices
(pure): the splicer of one exchange, and the lines it is made of.

After a cut the client still sees one NDJSON stream: reissued lines carry the client's
``model`` name, and the single final ``done: true`` line has the counters of every
attempt summed (``summed_final``, ``final_line``). NDJSON has no comments, so a cut
leaves no marker in a streamed body; it is logged and counted as on the other APIs, and a
non-streaming response carries the ``X-Runaway-*`` headers. A choice left inside an
inline ``<think>`` gets a ``</think>`` line; the ladder's end is one ``done: true`` line
with ``done_reason: "length"`` and the counters of every attempt; an error after output
started is an ``{"error": …}`` line.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from detectors import Verdict
from sidecar.apis.ollama.fold import LineKind, OllamaFold
from sidecar.core.attempt import Attempt, Totals
from sidecar.core.wire import Splicer
from sidecar.errors import UpstreamError

_NS = 1_000_000_000


def line(obj: Mapping[str, Any]) -> bytes:
    """One NDJSON line."""
    return orjson.dumps(obj) + b"\n"


def text_line(kind: LineKind, model: Any, created_at: Any, text: str) -> dict[str, Any]:
    """A line that adds ``text`` to the answer (e.g. a ``</think>`` closing an inline
    block before the reissued answer), as an object for :func:`line`."""
    obj: dict[str, Any] = {"model": model, "created_at": created_at}
    if kind == "chat":
        obj["message"] = {"role": "assistant", "content": text}
    else:
        obj["response"] = text
    obj["done"] = False
    return obj


def error_line(message: str) -> bytes:
    """The line Ollama sends when a stream fails after output started."""
    return line({"error": message})


def summed_final(obj: dict[str, Any], *, prompt_tokens: int, completion_tokens: int,
                 unknown_prompts: int, earlier_seconds: float) -> dict[str, Any]:
    """The reissue's ``done: true`` object with every earlier attempt added:
    ``prompt_eval_count`` (an attempt cut before its counters arrived is billed the
    reissue's prompt size: the same prompt, sent again), ``eval_count`` (the tokens the
    cut attempts streamed), and the wall time the earlier attempts took, added to
    ``total_duration`` and ``eval_duration``."""
    out = dict(obj)
    prompt = out.get("prompt_eval_count")
    prompt = prompt if isinstance(prompt, int) else 0
    out["prompt_eval_count"] = prompt + prompt_tokens + unknown_prompts * prompt
    count = out.get("eval_count")
    out["eval_count"] = (count if isinstance(count, int) else 0) + completion_tokens
    extra = int(earlier_seconds * _NS)
    for key in ("total_duration", "eval_duration"):
        value = out.get(key)
        if isinstance(value, int):
            out[key] = value + extra
    return out


def final_line(kind: LineKind, model: Any, created_at: Any, *, done_reason: str,
               prompt_tokens: int, completion_tokens: int, seconds: float) -> dict[str, Any]:
    """The ``done: true`` line the sidecar writes when the ladder ends a response itself
    (``done_reason: "length"``), with the counters of every attempt, as an object for
    :func:`line`."""
    obj: dict[str, Any] = {"model": model, "created_at": created_at}
    if kind == "chat":
        obj["message"] = {"role": "assistant", "content": ""}
    else:
        obj["response"] = ""
    ns = int(seconds * _NS)
    obj.update(done=True, done_reason=done_reason, total_duration=ns, load_duration=0,
               prompt_eval_count=prompt_tokens, prompt_eval_duration=0,
               eval_count=completion_tokens, eval_duration=ns)
    return obj


def created_at(wall: float) -> str:
    """The time of day ``wall`` (seconds since the epoch) as Ollama's ``created_at``
    (RFC 3339 in UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall))


class OllamaSplicer(Splicer):
    """The splicer of one ``/api/chat`` or ``/api/generate`` exchange. ``client_model`` is
    the name the client sees on every line: the first line's ``model`` (a fallback model
    stays invisible), else the request's."""

    def __init__(self, kind: LineKind, fold: OllamaFold | None, *, model: str | None) -> None:
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
