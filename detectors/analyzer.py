"""Text detectors look at fixed blocks; this module adapts them to the :class:`Detector`
protocol so each one can also run on its own (tests, ad-hoc tools)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from detectors.base import Channel, Evidence, Verdict
from detectors.blocks import Block, Blocker


@dataclass(frozen=True, slots=True)
class Finding:
    """What a block analyzer reports when its evidence crosses the threshold."""

    reason: str
    evidence: Evidence


class BlockAnalyzer(Protocol):
    """Incremental analysis of one channel, one :class:`Block` at a time."""

    def analyze(self, block: Block) -> Finding | None:
        """Take the next block of the channel; report a finding or None."""
        ...


class BlockDetector:
    """Runs one analyzer per channel behind the :class:`Detector` protocol.

    ``at_char`` of its verdict is the offset (over all channels fed so far) of the end of the
    block that crossed the threshold, so any chunking of the same text gives the same value.
    After its verdict it returns None.
    """

    __slots__ = ("_analyzers", "_blockers", "_chars", "_done", "_factory", "_tokens", "name")

    def __init__(self, name: str, factory: Callable[[], BlockAnalyzer]) -> None:
        self.name = name
        self._factory = factory
        self._blockers: dict[Channel, Blocker] = {}
        self._analyzers: dict[Channel, BlockAnalyzer] = {}
        self._chars = 0
        self._tokens = 0
        self._done = False

    def feed(self, channel: Channel, text: str, tokens: int, now: float) -> Verdict | None:
        """Take one delta; see the class docstring for ``at_char``."""
        before = self._chars
        self._chars += len(text)
        self._tokens += tokens
        blocker = self._blockers.get(channel)
        if blocker is None:
            blocker = self._blockers[channel] = Blocker()
            self._analyzers[channel] = self._factory()
        base = blocker.chars
        blocks = blocker.push(text)
        if blocks is None or self._done:
            return None
        analyzer = self._analyzers[channel]
        for block in blocks:
            found = analyzer.analyze(block)
            if found is not None:
                self._done = True
                at_char = before + (block.end - base)
                return Verdict(
                    self.name, channel, found.reason, found.evidence, self._tokens, at_char
                )
        return None

    def tick(self, now: float) -> Verdict | None:
        """Text detectors have no clock-driven part."""
        return None


def excerpt(text: str, limit: int = 200) -> str:
    """A short, single-spaced excerpt for :class:`Evidence`."""
    return " ".join(text.split())[:limit]
