"""Ollama's native API (``/api/chat``, ``/api/generate``): the line model, request bodies
and the NDJSON lines the sidecar writes itself when it splices (pure).

Wire format (``docs/protocols.md`` §8, Ollama ``fb307609``): one JSON object per line;
chat puts text in ``message.content`` and thinking in ``message.thinking``, generate in
``response`` and ``thinking``; the last line has ``done: true``, ``done_reason`` and the
counters ``prompt_eval_count``/``eval_count`` with their durations (nanoseconds); an
error after output started is one more line ``{"error": "…"}`` and the stream ends.

After a cut the client still sees one NDJSON stream: reissued lines carry the client's
``model`` name, and the single final ``done: true`` line has the counters of every
attempt summed (see ``final_line``). NDJSON has no comments, so a cut leaves no marker
in a streamed body; it is logged and counted as on the OpenAI routes, and a
non-streaming response carries the ``X-Runaway-*`` headers.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import orjson

from detectors.base import CONTENT, THINKING
from sidecar.config import ThinkingOffRule
from sidecar.core.bodies import with_thinking_off
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

LineKind = Literal["chat", "generate"]
NATIVE_PATHS: Mapping[LineKind, str] = {"chat": "/api/chat", "generate": "/api/generate"}
NDJSON_TYPE = "application/x-ndjson"
_NS = 1_000_000_000


def client_streams(body: Mapping[str, Any]) -> bool:
    """Ollama streams unless the request says ``"stream": false``."""
    return body.get("stream") is not False


def watched_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """The body sent upstream: always streaming, so the sidecar can watch it."""
    out = dict(body)
    out["stream"] = True
    return out


def no_think_body(body: Mapping[str, Any], rules: Sequence[ThinkingOffRule], *,
                  model: str | None = None) -> dict[str, Any]:
    """The thinking-off reissue (``think: false``; levels only for gpt-oss), on
    ``model`` when the ladder step is a fallback."""
    out = watched_body(body)
    if model is not None:
        out["model"] = model
    return with_thinking_off(out, rules)


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
