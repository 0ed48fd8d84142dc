"""The detectors' scores along a text: what each rule compares with its threshold, block by
block, for calibration and plots. Optional and pure: the chain never imports this module,
so a stream that is not traced pays nothing for it.

:data:`SCORES` is the explicit registry: for each calibrated rule, the detector it belongs
to, the :class:`~detectors.config.DetectorConfig` field that holds its threshold, and how
to read its current value from the detector's analyzer. A rule fires on a block whose
value reaches the threshold; :func:`score_trace` runs the analyzers with every registered
threshold out of reach (:func:`unreachable`), so that each value is read to the end of the
text, not only up to the first verdict. Up to that verdict the values are the ones the
chain computes: the analyzers are the chain's own (``text_analyzers``), fed the same
256-character blocks.

Rules read as the most so far (``running_max``) only expose their running maximum; the
others are the value at each block. A rule not registered here (the degeneration runs,
periodic's count of copies) has no score, and calibration leaves its threshold as it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from detectors.blocks import Blocker
from detectors.chain import text_analyzers
from detectors.config import DetectorConfig


@dataclass(frozen=True, slots=True)
class Score:
    """One rule's score: ``read`` takes the detector's analyzer and returns the value the
    rule compares with ``DetectorConfig.<threshold>``; it fires at ``value >= threshold``."""

    detector: str
    name: str
    threshold: str
    read: Callable[[Any], float]
    #: The threshold is a whole number (a count of copies or characters).
    integer: bool
    #: The value is the most seen so far, not the value at each block.
    running_max: bool
    #: A threshold this rule never reaches.
    off: float
    #: The least a calibrated threshold stays above the healthy maximum, besides the
    #: ratio: small counts need a difference (the default 8 copies is 5 + 3).
    gap: float = 0.0

    @property
    def key(self) -> str:
        """``detector.name``, the key of this score in a :class:`ScoreTrace`."""
        return f"{self.detector}.{self.name}"


#: The calibrated rules, in the order the chain asks their detectors.
SCORES: tuple[Score, ...] = (
    Score("periodic", "copy", "periodic_copy_chars", lambda a: a.copied, True, False, 10**9),
    Score("restatement", "copies", "restatement_copies", lambda a: a.most, True, True, 10**9,
          gap=3),
    Score("recurrence", "evidence", "recurrence_evidence", lambda a: a.evidence, False, False,
          float("inf")),
    Score("recurrence", "window", "recurrence_threshold", lambda a: a.window_score, False,
          False, 2.0),
    Score("sentences", "repeated", "sentences_repeat_chars", lambda a: a.most, True, True,
          10**9),
)

#: Other thresholds of the registered detectors that :func:`unreachable` also lifts, so
#: that no rule of theirs ends a trace early (periodic's count of verbatim copies).
_ALSO_OFF = {"periodic_min_repeats": 10**9}


def unreachable(config: DetectorConfig) -> DetectorConfig:
    """``config`` with every registered threshold (and :data:`_ALSO_OFF`) out of reach."""
    changes: dict[str, Any] = {s.threshold: s.off for s in SCORES}
    changes.update(_ALSO_OFF)
    return dataclasses.replace(config, **changes)


@dataclass(frozen=True, slots=True)
class ScoreTrace:
    """The registered scores of one text, read after each complete block: ``ends[i]`` is
    the offset in the text just after block ``i``, ``values[key][i]`` the score ``key``
    (:attr:`Score.key`) then. Only the detectors that ``config`` enables have values."""

    ends: list[int]
    values: dict[str, list[float]]

    def maxima(self) -> dict[str, float]:
        """The highest value of each score over the whole text (0 for an empty text)."""
        return {key: max(vals, default=0.0) for key, vals in self.values.items()}

    def first_reaching(self, key: str, threshold: float) -> int | None:
        """The offset where score ``key`` first reaches ``threshold`` (None: never)."""
        for end, value in zip(self.ends, self.values.get(key, ()), strict=False):
            if value >= threshold:
                return end
        return None


def score_trace(text: str, config: DetectorConfig) -> ScoreTrace:
    """Read the registered scores of ``text``, fed as one channel of thinking in
    256-character blocks, with ``config``'s settings (its registered thresholds aside)."""
    analyzers = {name: make() for name, make in text_analyzers(unreachable(config))}
    read = [(s.key, s.read, analyzers[s.detector]) for s in SCORES if s.detector in analyzers]
    values: dict[str, list[float]] = {key: [] for key, _, _ in read}
    ends: list[int] = []
    for block in Blocker().push(text) or ():
        for analyzer in analyzers.values():
            analyzer.analyze(block)
        ends.append(block.end)
        for key, get, analyzer in read:
            values[key].append(float(get(analyzer)))
    return ScoreTrace(ends, values)
