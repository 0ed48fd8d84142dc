"""Value types and the protocol every detector follows.

A detector is a pure, incremental state machine. The proxy (or ``replay``) feeds it
one delta at a time as ``feed(channel, text, tokens, now)`` and it answers ``None``
or a :class:`Verdict`. Nothing here reads the clock, awaits or touches a socket:
time is an argument, so a recorded stream replays to the same verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, Protocol

Channel = Literal["thinking", "content"]
THINKING: Final[Channel] = "thinking"
CONTENT: Final[Channel] = "content"


@dataclass(frozen=True, slots=True)
class Evidence:
    """What a detector saw when it fired: a short excerpt of the repeating unit
    (at most ~200 characters), its period in characters (0 when the signal has no
    period, e.g. a budget) and how many times it was seen."""

    excerpt: str
    period: int
    count: int


@dataclass(frozen=True, slots=True)
class Verdict:
    """Produced once, by the delta that pushed a detector over its threshold.

    ``at_token`` counts tokens fed so far on all channels; ``at_char`` counts
    characters fed so far on all channels (both include the firing delta).
    """

    detector: str
    channel: Channel
    reason: str
    evidence: Evidence
    at_token: int
    at_char: int


class Detector(Protocol):
    """An incremental detector with bounded memory (at most 64 KiB per stream)."""

    name: str

    def feed(self, channel: Channel, text: str, tokens: int, now: float) -> Verdict | None:
        """Take one delta of ``text`` worth ``tokens`` tokens that arrived at ``now``."""
        ...

    def tick(self, now: float) -> Verdict | None:
        """Called by a timer with no new text, for clock-driven detectors (stall, wall budget)."""
        ...
