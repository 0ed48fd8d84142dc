"""Agent loops across turns: the same tool call, again and again, in one request's history.

Pure: a format-neutral history goes in (built from a parsed request body by
:mod:`detectors.agent_history`), findings come out. No I/O, no clock.

The history is a sequence of events, oldest first:

- :class:`Step`: one tool call the assistant made (name and canonical arguments) with the
  result the client sent back for it (``None`` when the history holds no result for it);
- :class:`Reply`: an assistant turn that called no tool, with its text;
- :class:`UserTurn`: a user message that is not a tool result (a new instruction).

:func:`check` looks at the trailing run only and reports:

- ``repeat``: the same call (name and canonical arguments) at least
  ``repeat_min`` times in a row, with the same result each time;
- ``cycle``: a cycle of 2 or 3 calls (not all the same) repeating at least ``cycle_min``
  times, each call with the same result as in the cycle before (A B A B A B);
- ``text``: at least ``text_min`` text-only assistant turns in a row whose text is the same
  after normalization (case, whitespace, punctuation and digits folded): the content loop.

A call whose result changes is polling, not a loop: a run of calls only continues while
the result is the same. Results are compared by hash, never pairwise; a result is hashed
only when its call matches the call after it, and compared a second time with durations,
clock times, dates and Codex's chunk ids masked (a test run that prints "in 0.31s" each
time) only when the plain hashes differ. User turns do not end a run: harnesses inject
user-role messages between iterations (plan reminders, "continue"), and a call repeated
across them with the same result is the same loop. Text-only replies between calls do
not end it either (harnesses that plan in text between calls); a history whose last
assistant turn is a text-only reply has no tool-call run (the agent ended its turn).
Work is bounded by the history's trailing ``window`` assistant events (the extractors stop
reading there), whatever the length of the history: ``benchmarks/agent_loops.py cost``
measures it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

LoopKind = Literal["repeat", "cycle", "text"]
KINDS: tuple[LoopKind, ...] = ("repeat", "cycle", "text")
_EXCERPT = 200


@dataclass(frozen=True, slots=True)
class Step:
    """One tool call and its result. ``index`` is the call's position in the request's
    history (message or input item); ``arguments`` is canonical JSON (sorted keys, no
    spaces) or the raw argument text when it is not JSON; ``result`` is the tool result as
    the client sent it (a string, or the API's list of content blocks), ``None`` if absent."""

    index: int
    name: str
    arguments: str
    result: object


@dataclass(frozen=True, slots=True)
class Reply:
    """An assistant turn with no tool call: its position in the history and its text."""

    index: int
    text: str


@dataclass(frozen=True, slots=True)
class UserTurn:
    """A user message that carries no tool result, at ``index`` in the history."""

    index: int


Event = Step | Reply | UserTurn


@dataclass(frozen=True, slots=True)
class LoopCall:
    """A call as the evidence names it: tool name and canonical arguments."""

    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class LoopFinding:
    """Produced by :func:`check` for each kind whose threshold the trailing run reaches.

    ``calls`` is the repeated call (``repeat``), the cycle in order (``cycle``) or empty
    (``text``); ``count`` counts calls (``repeat``), whole cycles (``cycle``) or turns
    (``text``); ``indices`` are the history positions of the repeated calls or turns, oldest
    first; ``excerpt`` is the repeated text (``text``, at most 200 characters) or ``""``."""

    kind: LoopKind
    calls: tuple[LoopCall, ...]
    count: int
    indices: tuple[int, ...]
    excerpt: str = ""


@dataclass(frozen=True, slots=True)
class LoopConfig:
    """Thresholds of :func:`check`; defaults calibrated on tests/data/agent-trajectories
    (``benchmarks/agent_loops.py`` prints the table)."""

    #: ``repeat`` fires at this many identical calls in a row with identical results.
    repeat_min: int = 6
    #: ``cycle`` fires at this many whole repetitions of a 2- or 3-call cycle.
    cycle_min: int = 3
    #: ``text`` fires at this many text-only assistant turns in a row with the same text.
    text_min: int = 4
    #: Texts shorter than this (after normalization) never count ("OK.", "Done.").
    text_min_chars: int = 16
    #: The extractors read at most this many trailing assistant events (calls and replies).
    window: int = 64

    def __post_init__(self) -> None:
        if min(self.repeat_min, self.cycle_min, self.text_min) < 2:
            raise ValueError("agent loop thresholds must be at least 2")
        needed = max(self.repeat_min, 3 * self.cycle_min, self.text_min)
        if self.window < needed:
            raise ValueError(f"agent loop window must be at least {needed}")


_VOLATILE = re.compile(
    r"\d{4}-\d\d-\d\d[T ]?|\d{1,2}:\d\d(?::\d\d)?(?:[.,]\d+)?"
    r"|\d+(?:\.\d+)?\s?(?:ms|us|µs|ns|s|sec|secs|seconds?|m|min|minutes?|h)\b"
    # Codex CLI heads every exec_command result with a fresh random chunk id.
    r"|\bChunk ID: [0-9a-f]+\b"
)
_NON_WORD = re.compile(r"[\W_]+")
_DIGITS = re.compile(r"\d+")


def mask_volatile(text: str) -> str:
    """``text`` with durations, clock times, dates and Codex's ``Chunk ID`` masked (the
    second comparison)."""
    return _VOLATILE.sub("\x00", text)


def result_text(result: object) -> str | None:
    """The text of a tool result: a string as is, content blocks joined (text fields)."""
    if result is None or isinstance(result, str):
        return result
    if isinstance(result, list):
        parts = []
        for block in result:
            if isinstance(block, dict):
                text = block.get("text")
                parts.append(text if isinstance(text, str) else repr(sorted(block.items())))
            else:
                parts.append(str(block))
        return "\x1e".join(parts)
    return repr(result)


class _Results:
    """Lazy result hashes per step position: plain first, masked only when asked."""

    __slots__ = ("_masked", "_plain", "_steps")

    def __init__(self, steps: Sequence[Step]) -> None:
        self._steps = steps
        self._plain: dict[int, int | None] = {}
        self._masked: dict[int, int | None] = {}

    def _get(self, i: int, masked: bool) -> int | None:
        cache = self._masked if masked else self._plain
        if i not in cache:
            text = result_text(self._steps[i].result)
            if text is not None and masked:
                text = mask_volatile(text)
            cache[i] = None if text is None else hash(text)
        return cache[i]

    def same(self, i: int, j: int) -> bool:
        """Whether steps ``i`` and ``j`` got the same result (a missing result never does)."""
        a, b = self._get(i, False), self._get(j, False)
        if a is None or b is None:
            return False
        return a == b or self._get(i, True) == self._get(j, True)


def _steps(history: Sequence[Event]) -> list[Step]:
    """The steps of the history, oldest first; none when its last assistant event is a
    text-only reply (the agent ended its turn: the calls before are no longer trailing)."""
    for event in reversed(history):
        if isinstance(event, Reply):
            return []
        if isinstance(event, Step):
            break
    return [event for event in history if isinstance(event, Step)]


def _repeat(steps: Sequence[Step], results: _Results, config: LoopConfig) -> LoopFinding | None:
    last = len(steps) - 1
    if last < 0:
        return None
    key = (steps[last].name, steps[last].arguments)
    first = last
    while first > 0:
        prev = steps[first - 1]
        if (prev.name, prev.arguments) != key or not results.same(first - 1, last):
            break
        first -= 1
    count = last - first + 1
    if count < config.repeat_min:
        return None
    return LoopFinding("repeat", (LoopCall(*key),), count,
                       tuple(s.index for s in steps[first:]))


def _cycle(steps: Sequence[Step], results: _Results, config: LoopConfig) -> LoopFinding | None:
    best: LoopFinding | None = None
    for period in (2, 3):
        n = len(steps)
        if n < 2 * period:
            continue
        keys = [(s.name, s.arguments) for s in steps[n - period:]]
        if len(set(keys)) == 1:
            continue  # one call repeated: a repeat, not a cycle
        i = n - 1
        while i - period >= 0:
            a, b = steps[i], steps[i - period]
            if (a.name, a.arguments) != (b.name, b.arguments) or not results.same(i, i - period):
                break
            i -= 1
        length = n - 1 - i + period  # positions in the periodic tail
        reps = length // period
        if reps >= config.cycle_min and (best is None or reps * period > best.count * len(
                best.calls)):
            tail = steps[n - reps * period:]
            best = LoopFinding("cycle", tuple(LoopCall(*k) for k in keys), reps,
                               tuple(s.index for s in tail))
    return best


def normalize_text(text: str) -> str:
    """Case, whitespace, punctuation and digits folded: near-verbatim texts become equal."""
    return _DIGITS.sub("0", _NON_WORD.sub(" ", text.casefold())).strip()


def _text(history: Sequence[Event], config: LoopConfig) -> LoopFinding | None:
    replies: list[Reply] = []
    target: int | None = None
    for event in reversed(history):
        if isinstance(event, UserTurn):
            continue
        if isinstance(event, Step):
            break
        norm = normalize_text(event.text)
        if len(norm) < config.text_min_chars:
            break
        digest = hash(norm)
        if target is None:
            target = digest
        elif digest != target:
            break
        replies.append(event)
    if len(replies) < config.text_min:
        return None
    replies.reverse()
    return LoopFinding("text", (), len(replies), tuple(r.index for r in replies),
                       replies[-1].text.strip()[:_EXCERPT])


def check(history: Sequence[Event], config: LoopConfig) -> tuple[LoopFinding, ...]:
    """Every kind of loop the trailing run of ``history`` shows, ``repeat`` first.

    A run reported as ``repeat`` is not reported again as a ``cycle``."""
    steps = _steps(history)
    results = _Results(steps)
    found: list[LoopFinding] = []
    repeat = _repeat(steps, results, config)
    if repeat is not None:
        found.append(repeat)
    cycle = _cycle(steps, results, config)
    if cycle is not None:
        found.append(cycle)
    text = _text(history, config)
    if text is not None:
        found.append(text)
    return tuple(found)
