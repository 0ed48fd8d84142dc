"""Format-neutral stream events: what every wire API's decoder turns upstream bytes into,
and what the detectors and the bookkeeping consume (pure).

Each API module decodes its own wire format (OpenAI chunks, Ollama lines, ...) into these
events, per choice index (``n>1`` is tracked per choice):

- ``TextDelta`` with ``channel="thinking"`` for reasoning, whichever field or inline
  ``<think>`` tags it came in, and ``channel="content"`` for the answer;
- ``ToolCallDelta``, ``Finish``, ``Usage``, ``StreamError`` and ``Done``.

``ThinkTagSplitter`` is the shared reader of inline ``<think>``/``</think>`` tags.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from detectors.base import CONTENT, THINKING, Channel

_OPEN = "<think>"
_CLOSE = "</think>"


class MalformedChunk(ValueError):
    """An upstream payload that is not a JSON object of the expected shape."""


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
    """A tool-call fragment for choice ``index`` (kept as the server sent it)."""

    index: int
    tool_calls: list[Any]


@dataclass(frozen=True, slots=True)
class Finish:
    """Choice ``index`` finished with ``reason`` (``stop``, ``length``, ``tool_calls``...)."""

    index: int
    reason: str


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts the upstream reported; ``final`` when they close the stream (or, on
    llama.cpp, one of its ``n`` choices: each ends with its own)."""

    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int | None
    final: bool
    #: How many final reports these counts add up (one per choice on llama.cpp).
    reports: int = 1

    def plus(self, other: Usage) -> Usage:
        """The final usage of two choices' reports together."""
        reasoning = (None if self.reasoning_tokens is None and other.reasoning_tokens is None
                     else (self.reasoning_tokens or 0) + (other.reasoning_tokens or 0))
        return Usage(self.prompt_tokens + other.prompt_tokens,
                     self.completion_tokens + other.completion_tokens, reasoning,
                     final=True, reports=self.reports + other.reports)


@dataclass(frozen=True, slots=True)
class StreamError:
    """An in-stream error; the stream is over after it."""

    message: str
    code: int | None


@dataclass(frozen=True, slots=True)
class Done:
    """The end-of-stream marker (``[DONE]`` on OpenAI's APIs)."""


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

    def deltas(self, index: int, text: str, tokens: int, out: list[StreamEvent]) -> int:
        """Append choice ``index``'s ``TextDelta``s for ``text`` to ``out``, ``tokens``
        credited to the first piece and the rest free; return the tokens still uncredited
        (``tokens`` when every piece is held back, else 0)."""
        for channel, piece in self.split(text):
            out.append(TextDelta(index, channel, piece, tokens))
            tokens = 0
        return tokens

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
