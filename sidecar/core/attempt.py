"""The bookkeeping of one watched upstream attempt, the same for every wire API (pure).

An attempt is one upstream request of a client request: the first, or a reissue. Each
wire API subclasses :class:`Attempt` with its decoder: bytes in, the bytes the client
should see now out (``feed``/``eof``), while the events it decodes pass through
``_apply``. What is kept here is format-neutral: one :class:`ChoiceState` and detector
chain per upstream choice, the first verdict, token counts, usage, errors and the end
of the stream.

A thinking delta of choice 0 that cannot reach a verdict (its chain's ``room``) may be
held back and applied with the next that can, or with any other event, a tick, the end,
or :meth:`Attempt.settle`: at 256 streams, a delta that touches its attempt only costs a
fraction of one that touches the choice, its chain and its kept texts, each out of the
CPU caches. Every public reader of the attempt's state settles first.

When a detector fires and ``stop_on_verdict`` is set, the attempt stops at that event:
later events of the same read are dropped and ``verdict`` is set. The I/O layer then
leaves the upstream response, which closes the connection and makes vLLM abort the
request.
"""

from __future__ import annotations

import abc
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from detectors import Chain, DetectorConfig, Verdict, default_chain
from detectors.base import THINKING, Channel
from detectors.blocks import KeepingBlocker
from detectors.chain import text_analyzers
from sidecar.core.events import Done, Finish, StreamError, TextDelta, ToolCallDelta, Usage
from sidecar.core.kept import MAX_KEPT_REASONING, KeptText

#: Characters of a choice's reasoning that, with its length, identify it (``reasoning_mark``).
MARK_HEAD: Final[int] = 256
#: Thinking deltas an attempt holds back at most before it applies them (``_hold``).
MAX_HELD: Final[int] = 64


@dataclass(slots=True)
class ChoiceState:
    """What the sidecar knows about one choice of one attempt."""

    chain: Chain
    finished: bool = False
    thinking_tokens: int = 0
    content_tokens: int = 0
    #: The reasoning kept for salvage (bounded); None for an attempt that keeps none (no
    #: salvage in its ladder).
    reasoning: KeptText | None = None
    #: The thinking text its chain was fed, kept for the trace recorder as the chain cuts
    #: it into blocks (``Chain.keep_thinking``); None when the attempt is not recorded.
    recorded: KeepingBlocker | None = None
    #: All reasoning characters seen, and the first ``MARK_HEAD`` of them: enough to
    #: recognize this reasoning when a client sends it back (``reasoning_mark``).
    reasoning_seen: int = 0
    reasoning_head: str = ""

    def reasoning_text(self) -> str:
        """The reasoning kept so far."""
        return "" if self.reasoning is None else self.reasoning.text()


@dataclass(frozen=True, slots=True)
class Totals:
    """Token counts of earlier attempts, added to the usage the client finally sees."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    #: Earlier attempts cut before their usage arrived; each is billed the prompt size
    #: of an attempt that reported usage (the same prompt, sent again).
    unknown_prompts: int = 0
    #: The prompt size the last attempt that reported usage had; before any did, the
    #: estimate the exchange started with (``sidecar.core.bodies.prompt_estimate``).
    last_prompt: int = 0

    def usage(self) -> dict[str, Any]:
        """The usage object for a response that ends without upstream usage (every
        attempt cut): all tokens generated, the prompt billed once per attempt (at its
        estimate when no attempt reported usage)."""
        prompt = self.prompt_tokens + self.unknown_prompts * self.last_prompt
        return {"prompt_tokens": prompt, "total_tokens": prompt + self.completion_tokens,
                "completion_tokens": self.completion_tokens,
                "completion_tokens_details": {"reasoning_tokens": self.reasoning_tokens}}


@dataclass(frozen=True, slots=True)
class AttemptSpec:
    """What one upstream attempt is asked to do, whatever its wire API."""

    #: 0 for the first attempt, then 1, 2, ... for the reissues.
    number: int
    #: The detector settings of this request (budgets resolved).
    detectors: DetectorConfig
    #: When the attempt started, and when its exchange did (loop time, seconds).
    started_at: float
    exchange_started: float
    #: The tokens of the attempts before this one.
    earlier: Totals = Totals()
    #: The ladder step that made this attempt: ``original``, ``no-think``, ``salvage``
    #: or ``fallback:MODEL``.
    step: str = "original"
    #: Upstream choice index -> client choice index (a reissue asks only for the choices
    #: still open); empty: the same index.
    index_map: Mapping[int, int] = field(default_factory=dict)
    #: Stop at the first verdict (``enforce`` and ``cut``; ``shadow`` only records it).
    stop_on_verdict: bool = True
    #: Keep each choice's reasoning (bounded) for a salvage step.
    keep_reasoning: bool = False
    #: Keep each choice's first this many characters of reasoning for the trace recorder
    #: (0: none; ``sidecar.traces``).
    record_chars: int = 0


class Attempt(abc.ABC):
    """What every watched upstream attempt keeps, whatever its wire format: one
    :class:`ChoiceState` and detector chain per upstream choice, the first verdict,
    token counts, usage, errors and the end of the stream. Subclasses decode their bytes
    into stream events and pass each read's events to ``_apply``."""

    def __init__(self, spec: AttemptSpec) -> None:
        # What every event reads comes first (a subclass sets its own before calling
        # this): an instance's attribute values are laid out in the order they are first
        # set, and at 256 streams an event finds its stream's objects out of the CPU
        # caches, where each cache line touched costs more than the bytecode.
        self.verdict: Verdict | None = None
        self.done = False  # read by the read loop after every event
        # Choice 0's thinking deltas held back (``_hold``): their texts, characters and
        # the last one's time; and how many more, of how many characters, may be held
        # before when (from the chain's ``room``, once the choice has a first delta).
        self._held: list[str] = []
        self._held_chars = 0
        self._held_at = 0.0
        self._room_tokens = 0
        self._room_chars = 0
        self._until = 0.0
        #: Choice 0's state, once it exists (the one every event of one choice updates).
        self._first: ChoiceState | None = None
        # Without salvage in the ladder nothing reads the kept reasoning, and a long
        # stream saves up to 32K characters per choice.
        self.keeps_reasoning = spec.keep_reasoning
        self._keep_limit = MAX_KEPT_REASONING
        # The trace recorder's characters per choice (0: not recorded). Its chains keep
        # the thinking they are cut into blocks (nothing more per delta); with no text
        # detector on thinking there are no blocks, and the deltas are kept instead.
        self._record = spec.record_chars
        if self._record and not text_analyzers(spec.detectors):
            self.keeps_reasoning = True
            self._keep_limit = max(self._keep_limit, self._record)
        # Set once a recorded attempt keeps its choices' reasoning past a verdict.
        self._after = False
        self._choices: dict[int, ChoiceState] = {}
        self.number = spec.number
        self.index_map = spec.index_map
        self.earlier = spec.earlier
        self.stop_on_verdict = spec.stop_on_verdict
        self._detectors = spec.detectors
        self._started_at = spec.started_at
        self.verdict_index: int | None = None
        self.error: StreamError | None = None
        self.usage: Usage | None = None
        self.first_content_at: float | None = None
        self.step = spec.step

    # -- the wire API's part ---------------------------------------------------------

    @abc.abstractmethod
    def feed(self, chunk: bytes, now: float) -> bytes:
        """Process upstream bytes; return what to send to a streaming client now. Raises
        ``UpstreamProtocolError`` for bytes that are not this API's stream."""

    @abc.abstractmethod
    def eof(self, now: float) -> bytes:
        """The upstream closed the body: process what the decoder still held and return
        the bytes for the client."""

    @abc.abstractmethod
    def inline_open(self, client_index: int) -> bool:
        """Whether the choice's answer is inside an inline ``<think>`` left open."""

    # -- the common part -------------------------------------------------------------

    def tick(self, now: float) -> Verdict | None:
        """No bytes arrived for a while: let clock-driven detectors (stall, wall budget) look."""
        self._tick(now)
        return self.verdict

    def settle(self) -> None:
        """Apply the thinking deltas held back (``_hold``): the attempt's state is then
        that of every delta fed so far. The public readers below call it."""
        if self._held:
            self._settle()

    @property
    def choices(self) -> dict[int, ChoiceState]:
        """Each upstream choice's state, by index (settled)."""
        self.settle()
        return self._choices

    @property
    def stopped(self) -> bool:
        """True once a verdict should stop this attempt."""
        return self.verdict is not None and self.stop_on_verdict

    @property
    def open_choices(self) -> list[int]:
        """Client-side indices of choices that have not finished, in order."""
        self.settle()
        return sorted(self._client_index(i) for i, c in self._choices.items() if not c.finished)

    @property
    def finished_choices(self) -> frozenset[int]:
        """Client-side indices of the choices this attempt finished."""
        return frozenset(self._client_index(i) for i, c in self._choices.items() if c.finished)

    @property
    def counted_tokens(self) -> int:
        """Tokens of every choice of this attempt, counted from its text deltas."""
        self.settle()
        return sum(c.thinking_tokens + c.content_tokens for c in self._choices.values())

    @property
    def thinking_tokens(self) -> int:
        """Reasoning tokens of every choice of this attempt."""
        self.settle()
        return sum(c.thinking_tokens for c in self._choices.values())

    @property
    def content_tokens(self) -> int:
        """Answer tokens of every choice of this attempt."""
        self.settle()
        return sum(c.content_tokens for c in self._choices.values())

    @property
    def truncated(self) -> bool:
        """The stream ended without its end marker while a choice was still open."""
        return not self.done and (not self._choices or bool(self.open_choices))

    def reasoning_of(self, index: int) -> str:
        """The (bounded) reasoning text seen for upstream choice ``index`` ("" when the
        attempt keeps no reasoning)."""
        state = self.choices.get(index)
        if state is None:
            return ""
        text = state.reasoning_text()
        # A recorded attempt may keep more than salvage reads.
        return text[:MAX_KEPT_REASONING] if self._keep_limit > MAX_KEPT_REASONING else text

    def recorded_reasoning(self, index: int) -> tuple[str, bool]:
        """The reasoning of upstream choice ``index`` the trace recorder gets (its first
        ``record_chars`` characters), and whether more came. Text fed to the chain by a
        delta that hit a thinking budget is not in it (the chain stops before cutting it
        into blocks), nor thinking that comes back after the answer began."""
        state = self.choices.get(index)
        if state is None or not self._record:
            return "", False
        if state.recorded is None:
            text = state.reasoning_text()
        else:
            text = state.recorded.text()[0]
            if self._after and state.reasoning is not None:
                text += state.reasoning.text()
        text = text[: self._record]
        return text, state.reasoning_seen > len(text)

    def totals(self) -> Totals:
        """This attempt's tokens plus the earlier ones', for the next attempt."""
        usage = self.usage
        completion = max(usage.completion_tokens if usage else 0, self.counted_tokens)
        reasoning = self.thinking_tokens
        return Totals(
            self.earlier.prompt_tokens + (usage.prompt_tokens if usage else 0),
            self.earlier.completion_tokens + completion,
            self.earlier.reasoning_tokens + reasoning,
            self.earlier.unknown_prompts + (0 if usage else 1),
            usage.prompt_tokens if usage else self.earlier.last_prompt,
        )

    # -- internals -----------------------------------------------------------------

    def _client_index(self, index: int) -> int:
        return self.index_map.get(index, index)

    def _state(self, index: int) -> ChoiceState:
        state = self._choices.get(index)
        if state is None:
            chain = default_chain(self._detectors, started_at=self._started_at)
            state = self._choices[index] = ChoiceState(
                chain, reasoning=KeptText(self._keep_limit) if self.keeps_reasoning else None)
            if self._record:
                state.recorded = chain.keep_thinking(self._record)
            if index == 0:
                self._first = state
        return state

    def _tick(self, now: float) -> None:
        self.settle()
        if self.verdict is not None:
            return
        for index, state in self._choices.items():
            if not state.finished:
                verdict = state.chain.tick(now)
                if verdict is not None:
                    self._found(verdict, index)
                    return

    def _found(self, verdict: Verdict, index: int) -> None:
        """Take the attempt's first verdict. A recorded attempt that goes on after it
        (shadow) keeps its choices' reasoning from here delta by delta, since their chains
        are fed no more."""
        self.verdict, self.verdict_index = verdict, index
        self._room_chars = 0  # nothing is held past a verdict
        if self._record and not self.stop_on_verdict and not self.keeps_reasoning:
            self.keeps_reasoning = self._after = True
            self._keep_limit = self._record
            for state in self._choices.values():
                state.reasoning = KeptText(self._record)

    def _text(self, index: int, channel: Channel, text: str, tokens: int, now: float) -> None:
        """Count one text delta of choice ``index`` and feed it to that choice's chain
        (the first verdict stays: later deltas are counted, not judged)."""
        if channel == THINKING:
            self._think(index, text, tokens, now)
            return
        if self._held:
            self._settle()
        state = self._choices.get(index)
        if state is None:
            state = self._state(index)
        state.content_tokens += tokens
        if self.first_content_at is None:
            self.first_content_at = now
        if self.verdict is None:
            verdict = state.chain.feed(channel, text, tokens, now)
            if verdict is not None:
                self._found(verdict, index)

    def _hold(self, text: str, now: float) -> bool:
        """Hold back one thinking delta of choice 0 (one token) at ``now``, if it and
        those held before it cannot reach a verdict (the chain's ``room``); False when it
        must be applied now (``_think``). What the templated reads call, once per event:
        it touches this object alone."""
        chars = self._held_chars + len(text)
        held = self._held
        if chars < self._room_chars and len(held) < self._room_tokens and now < self._until:
            held.append(text)
            self._held_chars = chars
            self._held_at = now
            return True
        return False

    def _settle(self) -> None:
        """Apply the held deltas (there are some) as one: joined, at the last one's
        time."""
        held = self._held
        text = "".join(held)
        self._settled(held, text)
        self._thought(0, text, len(held), self._held_at, held)
        held.clear()
        self._held_chars = 0

    def _settled(self, texts: list[str], joined: str) -> None:
        """What a wire API keeps of held deltas itself (``texts``, joined ``joined``),
        before they are applied (nothing, unless overridden)."""
        return

    def _think(self, index: int, text: str, tokens: int, now: float) -> None:
        """``_text`` of a thinking delta (after the held ones)."""
        if self._held:
            self._settle()
        self._thought(index, text, tokens, now, None)

    def _thought(self, index: int, text: str, tokens: int, now: float,
                 parts: list[str] | None) -> None:
        """Apply thinking ``text``: one delta, or the held deltas ``parts`` joined."""
        state = self._first if index == 0 else self._choices.get(index)
        if state is None:
            state = self._state(index)
        state.thinking_tokens += tokens
        seen = state.reasoning_seen
        if seen < MARK_HEAD:
            state.reasoning_head = (state.reasoning_head + text)[:MARK_HEAD]
        state.reasoning_seen = seen + len(text)
        if self.keeps_reasoning:
            kept = state.reasoning
            if kept is not None:
                if parts is None:
                    kept.keep(text)
                else:
                    kept.keep_all(parts, text)
        if self.verdict is None:
            chain = state.chain
            verdict = chain.think(text, tokens, now)
            if verdict is not None:
                self._found(verdict, index)
            elif index == 0:
                tokens_room, self._room_chars, self._until = chain.room()
                self._room_tokens = min(MAX_HELD, tokens_room - 1)

    def _apply(self, parsed: list[Any], now: float) -> None:
        """Update state from one read's events (runs once per upstream event)."""
        if self._held:
            self._settle()
        for item in parsed:
            kind = type(item)  # the event types are final: an identity test is enough
            if kind is TextDelta:
                self._text(item.index, item.channel, item.text, item.tokens, now)
            elif kind is Finish:
                self._state(item.index).finished = True
            elif kind is Usage:
                # Kept whether or not the client asked: a server started with
                # --enable-force-include-usage sends it anyway, and so must we.
                usage = self.usage
                # llama.cpp ends each choice with its own usage: the attempt's is their
                # sum (vLLM's one final usage replaces its cumulative ones).
                self.usage = (usage.plus(item) if item.final and usage is not None
                              and usage.final else item)
            elif kind is Done:
                self.done = True
            elif kind is StreamError:
                self.error = item
                self.done = True
            elif kind is ToolCallDelta:
                self._state(item.index)


def reasoning_mark(length: int, head: str) -> str:
    """The mark of a reasoning text of ``length`` characters that starts with ``head``
    (its first ``MARK_HEAD`` characters): a digest, so that the runaway memory keeps no
    text. Two different reasonings share a mark only if they start alike for 256
    characters and have the same length."""
    key = f"{length}:{head[:MARK_HEAD]}".encode("utf-8", "surrogatepass")
    return "r" + hashlib.blake2b(key, digest_size=16).hexdigest()


def text_mark(text: str) -> str:
    """:func:`reasoning_mark` of a whole text a client sent back."""
    return reasoning_mark(len(text), text[:MARK_HEAD])
