"""The stream model: parsed chunks of an OpenAI-style stream in, typed events out.

Pure and incremental. ``StreamModel.feed(data)`` takes the ``data`` payload of one SSE
event (bytes), parses it once with orjson and returns the events it carries, per choice
index (``n>1`` is tracked per choice):

- ``TextDelta`` with ``channel="thinking"`` for ``delta.reasoning``,
  ``delta.reasoning_content`` or text between inline ``<think>``/``</think>`` tags in
  ``delta.content`` (chat) or ``text`` (completions); tags may be split across chunks,
  and a lone ``</think>`` (templates that pre-fill ``<think>``) switches to content;
- ``TextDelta`` with ``channel="content"`` for the answer;
- ``ToolCallDelta``, ``Finish``, ``Usage``, ``StreamError`` and ``Done``.

Token counts come from cumulative ``usage`` on every chunk when the server sends it
(``continuous_usage_stats``); otherwise each chunk that carries text counts as one token,
which is what vLLM sends with the default ``stream_interval`` of 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import orjson

from detectors.base import CONTENT, THINKING, Channel

Route = Literal["chat", "completions"]

_OPEN = "<think>"
_CLOSE = "</think>"


class MalformedChunk(ValueError):
    """An SSE data payload that is not a JSON object of the expected shape."""


@dataclass(slots=True)
class TextDelta:
    """Text generated for choice ``index`` on ``channel``, worth ``tokens`` tokens.

    Read-only by contract but not ``frozen``, like ``SSEEvent``: one is made per token."""

    index: int
    channel: Channel
    text: str
    tokens: int


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A ``delta.tool_calls`` fragment for choice ``index`` (kept as the server sent it)."""

    index: int
    tool_calls: list[Any]


@dataclass(frozen=True, slots=True)
class Finish:
    """Choice ``index`` finished with ``reason`` (``stop``, ``length``, ``tool_calls``...)."""

    index: int
    reason: str


@dataclass(frozen=True, slots=True)
class Usage:
    """A ``usage`` object; ``final`` when it came on a ``choices: []`` chunk."""

    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int | None
    final: bool


@dataclass(frozen=True, slots=True)
class StreamError:
    """An in-stream ``{"error": {...}}`` event; the stream is over after it."""

    message: str
    code: int | None


@dataclass(frozen=True, slots=True)
class Done:
    """The ``[DONE]`` sentinel."""


StreamEvent = TextDelta | ToolCallDelta | Finish | Usage | StreamError | Done

DONE = Done()


class ThinkTagSplitter:
    """Splits text with inline ``<think>``/``</think>`` tags into (channel, text) pieces.

    A tag split across deltas is held back until it is complete; the tags themselves are
    dropped. ``</think>`` without a preceding ``<think>`` also switches to content.
    """

    __slots__ = ("_pending", "in_think")

    def __init__(self, *, in_think: bool = False) -> None:
        self.in_think = in_think
        self._pending = ""

    def split(self, text: str) -> list[tuple[Channel, str]]:
        """Return the pieces of ``text`` whose channel is known so far."""
        if self._pending:
            text = self._pending + text
            self._pending = ""
        elif "<" not in text:
            return [(THINKING if self.in_think else CONTENT, text)] if text else []
        out: list[tuple[Channel, str]] = []
        pos = 0
        while True:
            lt = text.find("<", pos)
            if lt < 0:
                self._emit(out, text[pos:])
                return out
            rest = text[lt:]
            for tag, inside in ((_OPEN, True), (_CLOSE, False)):
                if rest.startswith(tag):
                    self._emit(out, text[pos:lt])
                    self.in_think = inside
                    pos = lt + len(tag)
                    break
            else:
                if _OPEN.startswith(rest) or _CLOSE.startswith(rest):
                    self._emit(out, text[pos:lt])
                    self._pending = rest
                    return out
                self._emit(out, text[pos : lt + 1])
                pos = lt + 1

    def flush(self) -> list[tuple[Channel, str]]:
        """End of stream: a held-back partial tag was text after all."""
        rest, self._pending = self._pending, ""
        return [(THINKING if self.in_think else CONTENT, rest)] if rest else []

    def _emit(self, out: list[tuple[Channel, str]], text: str) -> None:
        if text:
            channel: Channel = THINKING if self.in_think else CONTENT
            if out and out[-1][0] == channel:
                out[-1] = (channel, out[-1][1] + text)
            else:
                out.append((channel, text))


class _Choice:
    __slots__ = ("saw_reasoning", "splitter")

    def __init__(self, in_think: bool) -> None:
        self.splitter = ThinkTagSplitter(in_think=in_think)
        self.saw_reasoning = False


class StreamModel:
    """Turns the data payloads of one upstream stream into ``StreamEvent``s.

    ``chunk`` holds the last parsed JSON object (or None for ``[DONE]``), so callers
    that need more of it (ids, aggregation) do not parse again.
    """

    __slots__ = ("_choices", "_in_think", "_last_completion", "_usage_seen", "chunk", "route")

    def __init__(self, route: Route, *, starts_in_thinking: bool = False) -> None:
        self.route = route
        self.chunk: dict[str, Any] | None = None
        self._choices: dict[int, _Choice] = {}
        self._in_think = starts_in_thinking
        self._usage_seen = False
        self._last_completion = 0

    def feed(self, data: bytes) -> list[StreamEvent]:
        """Parse one event payload. Raises ``MalformedChunk`` for anything that is not
        ``[DONE]`` or a JSON object with the fields of a chunk."""
        if data == b"[DONE]":
            self.chunk = None
            return [DONE]
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise MalformedChunk(f"invalid JSON in stream: {exc}") from None
        if not isinstance(obj, dict):
            raise MalformedChunk("stream chunk is not a JSON object")
        self.chunk = obj
        err = obj.get("error")
        if err is not None:
            return [_error_event(err)]
        choices = obj.get("choices")
        if not isinstance(choices, list):
            raise MalformedChunk("stream chunk has no choices list")
        events: list[StreamEvent] = []
        usage = obj.get("usage")
        tokens = -1 if usage is None else self._tokens_from_usage(usage, bool(choices), events)
        for choice in choices:
            if not isinstance(choice, dict):
                raise MalformedChunk("choice is not an object")
            left = self._choice(choice, 1 if tokens < 0 else tokens, events)
            if tokens >= 0:
                tokens = left
        return events

    def inline_open(self, index: int) -> bool:
        """Whether choice ``index`` is inside an inline ``<think>`` that was not closed."""
        state = self._choices.get(index)
        return state is not None and not state.saw_reasoning and state.splitter.in_think

    def flush(self) -> list[StreamEvent]:
        """End of stream: emit text held back by tag splitters."""
        events: list[StreamEvent] = []
        for index, state in self._choices.items():
            for channel, text in state.splitter.flush():
                events.append(TextDelta(index, channel, text, 0))
        return events

    def _tokens_from_usage(self, usage: Any, has_choices: bool, events: list[StreamEvent]) -> int:
        """Tokens to credit to this chunk's text: the growth of cumulative usage, or -1
        (meaning one per chunk that carries text) when the server sends no usage."""
        if not isinstance(usage, dict):
            return -1
        completion = usage.get("completion_tokens")
        prompt = usage.get("prompt_tokens")
        if not isinstance(completion, int) or not isinstance(prompt, int):
            return -1
        details = usage.get("completion_tokens_details")
        reasoning = details.get("reasoning_tokens") if isinstance(details, dict) else None
        events.append(
            Usage(prompt, completion, reasoning if isinstance(reasoning, int) else None,
                  final=not has_choices)
        )
        grown = max(0, completion - self._last_completion)
        self._last_completion = max(self._last_completion, completion)
        self._usage_seen = True
        return grown

    def _choice(self, choice: dict[str, Any], tokens: int, events: list[StreamEvent]) -> int:
        """Append the events of one choice; return the tokens not yet credited to text."""
        index = choice.get("index", 0)
        if not isinstance(index, int):
            raise MalformedChunk("choice index is not an integer")
        state = self._choices.get(index)
        if state is None:
            state = self._choices[index] = _Choice(self._in_think)
        if self.route == "chat":
            delta = choice.get("delta")
            if isinstance(delta, dict):
                reasoning = delta.get("reasoning")
                if reasoning is None:
                    reasoning = delta.get("reasoning_content")
                if isinstance(reasoning, str) and reasoning:
                    state.saw_reasoning = True
                    events.append(TextDelta(index, THINKING, reasoning, tokens))
                    tokens = 0
                content = delta.get("content")
                if isinstance(content, str) and content:
                    tokens = self._inline(state, index, content, tokens, events)
                tool_calls = delta.get("tool_calls")
                if isinstance(tool_calls, list) and tool_calls:
                    events.append(ToolCallDelta(index, tool_calls))
        else:
            text = choice.get("text")
            if isinstance(text, str) and text:
                tokens = self._inline(state, index, text, tokens, events)
        reason = choice.get("finish_reason")
        if isinstance(reason, str):
            events.append(Finish(index, reason))
        return tokens

    def _inline(self, state: _Choice, index: int, text: str, tokens: int,
                events: list[StreamEvent]) -> int:
        if state.saw_reasoning:  # a reasoning parser runs upstream: content is content
            events.append(TextDelta(index, CONTENT, text, tokens))
            return 0
        for channel, piece in state.splitter.split(text):
            # The chunk's tokens are credited to its first piece; the rest come free.
            events.append(TextDelta(index, channel, piece, tokens))
            tokens = 0
        return tokens


def _error_event(err: Any) -> StreamError:
    if isinstance(err, dict):
        code = err.get("code")
        return StreamError(str(err.get("message", "")), code if isinstance(code, int) else None)
    return StreamError(str(err), None)
