"""The default chain: the explicit registry of detectors that run on every stream.

``Chain.feed`` is on the hot path (once per SSE delta), so it only bumps counters, checks the
token budget and appends the delta to its channel's :class:`~detectors.blocks.Blocker`. The
text analyzers run once per 256-character block of a channel, at fixed offsets, so the
verdict (detector, channel, at_char) does not depend on how the text was split into deltas.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Final

from detectors.analyzer import BlockAnalyzer
from detectors.base import THINKING, Channel, Verdict
from detectors.blocks import BLOCK_CHARS, Blocker, KeepingBlocker
from detectors.budget import Stall, ThinkingSecondsBudget, ThinkingTokenBudget
from detectors.config import DetectorConfig
from detectors.degeneration import DegenerationAnalyzer
from detectors.periodic import PeriodicAnalyzer
from detectors.recurrence import RecurrenceAnalyzer
from detectors.restatement import RestatementAnalyzer
from detectors.sentences import SentencesAnalyzer

AnalyzerFactory = tuple[str, Callable[[], BlockAnalyzer]]

#: Text detectors that watch the thinking channel only. An answer may write one line many
#: times (table rows, a field per item); rumination is a thinking-phase behaviour, and an
#: answer that loops is still caught by the periodic and recurrence detectors.
THINKING_ONLY = frozenset({"restatement", "sentences"})
#: The token limit without a token budget: more than any stream has, and small enough
#: for the compiled build's unboxed ints (``sys.maxsize`` is not: each compare with it
#: took the slow path, once per thinking delta).
_NO_TOKEN_LIMIT: Final[int] = 2**60


@functools.lru_cache(maxsize=64)
def text_analyzers(config: DetectorConfig) -> tuple[AnalyzerFactory, ...]:
    """The text detectors of ``config``, in the order they are asked (cheapest first).

    Made once per distinct config (the last 64 are kept), not per stream: a chain keeps
    them for the channels it starts later, and a stream's own copy was 1 KiB of closures."""
    found: list[AnalyzerFactory] = []
    if config.degeneration_enabled:
        found.append(
            (
                "degeneration",
                lambda: DegenerationAnalyzer(
                    config.salad_run_tokens,
                    config.symbol_run_tokens,
                    config.script_mix,
                    config.script_min_tokens,
                ),
            )
        )
    if config.periodic_enabled:
        found.append(
            (
                "periodic",
                lambda: PeriodicAnalyzer(
                    config.periodic_min_repeats,
                    config.periodic_min_span,
                    config.periodic_max_period,
                    config.periodic_copy_chars,
                ),
            )
        )
    if config.restatement_enabled:
        found.append(
            (
                "restatement",
                lambda: RestatementAnalyzer(
                    config.restatement_copies, config.restatement_window_chars
                ),
            )
        )
    if config.recurrence_enabled:
        found.append(
            (
                "recurrence",
                lambda: RecurrenceAnalyzer(
                    config.recurrence_shingle,
                    config.recurrence_history,
                    config.recurrence_min_seen,
                    config.recurrence_window_blocks,
                    config.recurrence_threshold,
                    config.recurrence_drift,
                    config.recurrence_evidence,
                    config.recurrence_code_min_seen,
                ),
            )
        )
    # After recurrence: on a block where both fire, the verdict stays recurrence's.
    if config.sentences_enabled:
        found.append(
            (
                "sentences",
                lambda: SentencesAnalyzer(
                    config.sentences_repeat_chars,
                    config.sentences_window_chars,
                    config.sentences_min_chars,
                ),
            )
        )
    return tuple(found)


class _Stream:
    """One channel: its blocker and its own analyzer instances (state is per channel)."""

    __slots__ = ("analyzers", "blocker")

    def __init__(self, factories: tuple[AnalyzerFactory, ...]) -> None:
        self.blocker = Blocker()
        self.analyzers = [(name, make()) for name, make in factories]


class Chain:
    """Runs the registered detectors over one stream and reports the first verdict.

    After the first verdict the chain is latched: ``feed`` and ``tick`` return None and the
    verdict stays available as :attr:`verdict`. ``at_token``/``at_char`` count all channels.

    Memory: each channel's text detectors allocate their state with the channel's first
    256-character block. Once the content channel has one (the answer has begun), the
    thinking channel's state is released, so a stream holds one channel's tables at a time.
    """

    __slots__ = (
        "_answered",
        "_content",
        "_content_factories",
        "_deadline",
        "_factories",
        "_last_at",
        "_last_channel",
        "_seconds_budget",
        "_stall",
        "_thinking",
        "_thinking_blocker",
        "_token_budget",
        "_token_limit",
        "chars",
        "content_tokens",
        "name",
        "thinking_tokens",
        "verdict",
    )

    def __init__(self, config: DetectorConfig, started_at: float = 0.0) -> None:
        self.name = "chain"
        factories = text_analyzers(config)
        self._factories = factories
        self._thinking = _Stream(factories)
        # The thinking channel's blocker while a text detector watches it (``think``).
        self._thinking_blocker = self._thinking.blocker if factories else None
        # Set once the content channel has produced its first block (see ``feed``).
        self._answered = False
        # Built on the first content delta: most of a reasoning stream never needs its tables.
        self._content: _Stream | None = None
        self._content_factories = (
            tuple(f for f in factories if f[0] not in THINKING_ONLY)
            if config.content_enabled
            else ()
        )
        self._token_budget = (
            None
            if config.thinking_token_budget is None
            else ThinkingTokenBudget(config.thinking_token_budget)
        )
        self._seconds_budget = (
            None
            if config.thinking_seconds_budget is None
            else ThinkingSecondsBudget(config.thinking_seconds_budget, started_at)
        )
        self._stall = None if config.stall_seconds is None else Stall(config.stall_seconds)
        # What the per-delta path compares against, so a delta far from every budget makes
        # no call: the budgets' own limits, or limits never reached when a budget is off.
        self._token_limit = (_NO_TOKEN_LIMIT if self._token_budget is None
                             else self._token_budget.budget)
        self._deadline = math.inf if self._seconds_budget is None else self._seconds_budget.deadline
        # When the last delta came (the start before the first): the stall detector's clock.
        self._last_at = started_at
        self._last_channel: Channel = THINKING
        #: Thinking tokens fed so far.
        self.thinking_tokens = 0
        #: Content tokens fed so far.
        self.content_tokens = 0
        #: Characters fed so far on all channels.
        self.chars = 0
        #: The first verdict, once there is one.
        self.verdict: Verdict | None = None

    @property
    def tokens(self) -> int:
        """Tokens fed so far on all channels."""
        return self.thinking_tokens + self.content_tokens

    def feed(self, channel: Channel, text: str, tokens: int, now: float) -> Verdict | None:
        """Take one delta; return the verdict it triggers (only the first one ever)."""
        if self.verdict is not None:
            return None
        before = self.chars
        self.chars = before + len(text)
        if now > self._last_at:  # noqa: PLR1730 (once per delta: a comparison costs less than max())
            self._last_at = now
        self._last_channel = channel
        if channel == THINKING:
            thinking = self.thinking_tokens = self.thinking_tokens + tokens
            if (thinking >= self._token_limit or now >= self._deadline) and not self.content_tokens:
                v = self._budgets(now)
                if v is not None:
                    self.verdict = v
                    return v
            stream = self._thinking
        else:
            self.content_tokens += tokens
            if self._content is None:
                self._content = _Stream(self._content_factories)
            stream = self._content
        if not stream.analyzers:  # no text detector watches this channel: nothing to cut
            return None
        blocker = stream.blocker
        pending = blocker.pending + text
        if len(pending) < BLOCK_CHARS:  # ``Blocker.push`` without a call: no block yet
            blocker.pending = pending
            return None
        blocks = blocker.push(text)
        if blocks is None:
            return None
        base = blocker.chars - len(text)  # the channel's characters before this delta
        if not self._answered and stream is self._content:
            # The answer has begun: 256 characters of content, not a line break before a
            # <think>. Thinking does not come back after the answer with the reasoning
            # parsers, so its detectors' state (up to 48 KiB of recurrence table and ring) is
            # released; thinking that does come back starts from fresh state.
            self._answered = True
            self._thinking = _Stream(self._factories)
            self._thinking_blocker = self._thinking.blocker
        for block in blocks:
            for name, analyzer in stream.analyzers:
                found = analyzer.analyze(block)
                if found is not None:
                    self.verdict = Verdict(
                        name,
                        channel,
                        found.reason,
                        found.evidence,
                        self.tokens,
                        before + (block.end - base),
                    )
                    return self.verdict
        return None

    def think(self, text: str, tokens: int, now: float) -> Verdict | None:
        """``feed(THINKING, text, tokens, now)``, for the hot path: a delta that reaches
        no budget and completes no block (nearly every one) is counted and kept here in
        the fewest steps, and any other goes through ``feed``. The same state and
        verdicts either way."""
        thinking = self.thinking_tokens + tokens
        blocker = self._thinking_blocker
        if blocker is None:  # no text detector watches thinking
            return self.feed(THINKING, text, tokens, now)
        pending = blocker.pending + text
        if (len(pending) >= BLOCK_CHARS or thinking >= self._token_limit
                or now >= self._deadline or self.verdict is not None):
            return self.feed(THINKING, text, tokens, now)
        self.thinking_tokens = thinking
        self.chars += len(text)
        if now > self._last_at:  # noqa: PLR1730 (as in ``feed``)
            self._last_at = now
        self._last_channel = THINKING
        blocker.pending = pending
        return None

    def room(self) -> tuple[int, int, float]:
        """How much thinking ``think`` takes now without a budget check or a block:
        deltas fewer than the first many tokens together, with fewer characters than the
        second, each before the third (a loop time). Such deltas fed as one (their texts
        joined, their tokens summed, at the last one's time) leave the chain as they
        would have one by one, and no verdict. Nothing once there is a verdict."""
        if self.verdict is not None:
            return 0, 0, -math.inf
        blocker = self._thinking_blocker
        chars = _NO_TOKEN_LIMIT if blocker is None else BLOCK_CHARS - len(blocker.pending)
        return self._token_limit - self.thinking_tokens, chars, self._deadline

    def keep_thinking(self, limit: int) -> KeepingBlocker | None:
        """Keep the thinking channel's text from now on, up to ``limit`` characters, as
        its blocks are cut (nothing more per delta); read it from the returned blocker,
        which keeps it after the chain moves on to the answer. None when no text detector
        watches thinking (its text is not cut into blocks). Call it before the first
        delta: text fed before is not kept."""
        if self._thinking_blocker is None:
            return None
        keeper = KeepingBlocker(limit)
        self._thinking.blocker = self._thinking_blocker = keeper
        return keeper

    def _budgets(self, now: float) -> Verdict | None:
        """The thinking budgets' verdict, token budget first (in the thinking phase)."""
        v = None
        if self._token_budget is not None:
            v = self._token_budget.check(self.thinking_tokens, self.tokens, self.chars)
        if v is None and self._seconds_budget is not None:
            v = self._seconds_budget.check(now, self.tokens, self.chars)
        return v

    def tick(self, now: float) -> Verdict | None:
        """Timer entry point: the stall detector and the wall-clock thinking budget."""
        if self.verdict is not None:
            return None
        v = None
        if (
            self._seconds_budget is not None
            and self.thinking_tokens
            and not self.content_tokens
        ):
            v = self._seconds_budget.check(now, self.tokens, self.chars)
        if v is None and self._stall is not None:
            v = self._stall.check(now, self._last_at, self._last_channel, self.tokens, self.chars)
        self.verdict = v
        return v


def default_chain(config: DetectorConfig, *, started_at: float = 0.0) -> Chain:
    """The detectors that guard a stream, configured once from ``config``.

    Registered, in order: the thinking token budget, the thinking wall-clock budget
    (counted from ``started_at``), then per channel the degeneration, periodic-tail,
    restatement, recurrence and sentences detectors (on ``content`` too, all but
    restatement and sentences, unless ``content_enabled`` is off), and on the timer the
    stall detector.
    """
    return Chain(config, started_at)
