"""Calibrating the detectors on the labelled traces of one's own traffic (pure).

Per model, every trace labelled ``loop`` or ``healthy`` (``ambiguous`` ones are shown,
not scored) is replayed through the chain with that model's settings (``[detectors]``
and its ``[[models]]`` entry) and its scores are read along the reasoning
(``detectors.scores``). From them:

- what the settings in force do: loops caught (recall), healthy traces flagged (false
  alarms), the median detection delay after the labelled onset, and each calibrated
  threshold's margin over the highest value the model's healthy traces reach (a ratio:
  threshold / maximum), the thinking budget's over the longest healthy reasoning;
- a proposal, one ``[[models]]`` entry: each threshold set to ``margin`` times the healthy
  maximum (a count of copies: at least 3 more, ``Score.gap``), the thinking budget to
  ``margin`` times the most thinking tokens of a healthy trace, rounded up to 256. A
  value is raised whenever its margin is smaller than that; it is lowered (and a budget
  set where there was none) only with at least ``min_healthy`` healthy traces, never
  below half its value, and never for a rule no healthy trace moved or a count of copies;
- then the proof: every healthy trace is replayed with the proposal, and a detector that
  still fires on one (by a rule with no calibrated threshold, or on the answer) is
  switched off for the model, with a note, until none does. The budget is above every
  healthy trace's thinking tokens by construction. So the proposal never makes a
  labelled healthy trace fire.

Thinking tokens are the record's ``thinking_tokens`` (counted by the server) or the
replay's pseudo-tokens, whichever is more: a budget above both holds live and in replay.
A loop counts as caught by the budget where its pseudo-tokens reach it.
"""

from __future__ import annotations

import dataclasses
import math
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from detectors import DetectorConfig
from detectors.replay import ReplayResult, replay_record, split_stream
from detectors.scores import SCORES, Score, ScoreTrace, score_trace
from detectors.tokenize import split_deltas
from sidecar.traces.store import Label, Trace

MARGIN = 1.5
MIN_HEALTHY = 30
BUDGET_STEP = 256
#: The window rule's score is a share: a threshold above 1 switches it off.
_SHARE_OFF = 1.01


@dataclass(frozen=True, slots=True)
class Scored:
    """One labelled trace, replayed with its model's settings and scored."""

    trace: Trace
    label: Label
    start: int
    end: int
    tokens: int
    #: Offset in the text after each thinking pseudo-token (where a budget is reached).
    token_ends: list[int] = field(repr=False)
    scores: ScoreTrace = field(repr=False)
    current: ReplayResult

    def budget_at(self, budget: int | None) -> int | None:
        """Where a thinking budget of ``budget`` tokens cuts this trace (None: never)."""
        if budget is None or budget > len(self.token_ends):
            return None
        return self.token_ends[budget - 1] if budget else self.start


def scored(trace: Trace, config: DetectorConfig) -> Scored:
    """Replay and score one labelled trace with ``config`` (its budgets are judged apart,
    from the tokens)."""
    assert trace.label is not None
    text = trace.text
    start, end, _ = split_stream(text) if isinstance(trace.record.get("text"), str) else (
        0, len(str(trace.record.get("reasoning") or "")), 0)
    reasoning = text[start:end]
    ends, at = [], start
    for piece in split_deltas(reasoning):
        at += len(piece)
        ends.append(at)
    recorded = trace.record.get("thinking_tokens")
    tokens = max(len(ends), recorded if isinstance(recorded, int) else 0)
    textual = dataclasses.replace(config, thinking_token_budget=None,
                                  thinking_seconds_budget=None)
    return Scored(trace, trace.label, start, end, tokens, ends,
                  score_trace(reasoning, config), replay_record(trace.record, textual))


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one set of settings does on a model's labelled traces."""

    recall: float | None
    caught: int
    loops: int
    false_alarms: int
    healthy: int
    median_delay_chars: int | None
    onsets: int
    #: Per trace id: where it fires (an offset in its text; None: it does not) and why.
    fired: dict[str, tuple[int | None, str | None]]


def outcome(items: Sequence[Scored], replays: dict[str, ReplayResult],
            budget: int | None) -> Outcome:
    """Score ``items`` with the text detectors' ``replays`` (by trace id) and ``budget``."""
    fired: dict[str, tuple[int | None, str | None]] = {}
    for s in items:
        r = replays[s.trace.id]
        at, why = (r.at_char, r.detector) if r.detected else (None, None)
        cut = s.budget_at(budget)
        if cut is not None and (at is None or cut < at):
            at, why = cut, "thinking_token_budget"
        fired[s.trace.id] = (at, why)
    loops = [s for s in items if s.label == "loop"]
    healthy = [s for s in items if s.label == "healthy"]
    caught = [s for s in loops if fired[s.trace.id][0] is not None]
    delays = [at - s.trace.onset for s in caught
              if s.trace.onset is not None and (at := fired[s.trace.id][0]) is not None]
    return Outcome(
        recall=len(caught) / len(loops) if loops else None, caught=len(caught),
        loops=len(loops), false_alarms=sum(fired[s.trace.id][0] is not None for s in healthy),
        healthy=len(healthy), onsets=len(delays), fired=fired,
        median_delay_chars=round(statistics.median(delays)) if delays else None)


@dataclass(frozen=True, slots=True)
class ModelReport:
    """The calibration of one model (see the module docstring)."""

    model: str
    items: list[Scored]
    ambiguous: list[Trace]
    config: DetectorConfig
    budget: int | None
    maxima: dict[str, float]
    longest_tokens: int
    current: Outcome
    proposed: dict[str, Any]
    proposed_budget: int | None
    after: Outcome
    notes: list[str]

    @property
    def healthy(self) -> int:
        """Healthy traces of the model."""
        return sum(s.label == "healthy" for s in self.items)

    def margins(self, proposal: bool = False) -> dict[str, dict[str, Any]]:
        """Each calibrated threshold (and the budget): its value, the healthy maximum and
        the margin (value / maximum; None when the maximum is 0 or there is none)."""
        cfg = dataclasses.replace(self.config, **self.proposed) if proposal else self.config
        out: dict[str, dict[str, Any]] = {}
        for s in SCORES:
            if s.key in self.maxima:
                out[s.key] = _margin(getattr(cfg, s.threshold), self.maxima[s.key],
                                     s.integer)
        budget = self.proposed_budget if proposal else self.budget
        if self.healthy:
            out["thinking_token_budget"] = _margin(budget, self.longest_tokens, True)
        return out


def _margin(value: float | None, top: float, integer: bool) -> dict[str, Any]:
    return {"value": value, "healthy_max": int(top) if integer else top,
            "margin": None if value is None or not top else round(value / top, 2)}


def _above(score: Score, top: float, margin: float) -> float:
    """The lowest value of ``score``'s threshold with ``margin`` over ``top``."""
    if score.integer:
        return float(max(math.floor(top) + 1, math.ceil(top * margin), top + score.gap))
    value = math.ceil(top * margin * 100) / 100
    if score.name == "window" and value > 1.0:
        return 1.0 if top < 1.0 else _SHARE_OFF
    return value if value > top else top + 0.01


def propose(items: Sequence[Scored], config: DetectorConfig, budget: int | None, *,
            margin: float, min_healthy: int) -> tuple[dict[str, Any], int | None, list[str]]:
    """The proposed thresholds (only those that change), budget and notes."""
    healthy = [s for s in items if s.label == "healthy"]
    proposed: dict[str, Any] = {}
    notes: list[str] = []
    if not healthy:
        return proposed, budget, ["no healthy trace: nothing to calibrate against"]
    may_lower = len(healthy) >= min_healthy
    if not may_lower:
        notes.append(f"{len(healthy)} healthy traces: thresholds are only raised (lowering "
                     f"one, or setting a budget, needs {min_healthy})")
    for score in SCORES:
        if score.key not in healthy[0].scores.values:
            continue
        top = max(s.scores.maxima()[score.key] for s in healthy)
        current = getattr(config, score.threshold)
        if not current:  # 0: the rule is off (periodic's copy rule), and stays off
            continue
        target = _above(score, top, margin)
        if target < current:
            # A rule no healthy trace moved says nothing about how low it may go; a small
            # count (copies of a statement) moves by whole steps, too coarse to lower on.
            if not may_lower or top <= 0 or score.gap:
                continue
            target = max(target, current / 2)
            target = float(math.ceil(target)) if score.integer else math.ceil(target * 100) / 100
        elif target == current:
            continue
        proposed[score.threshold] = int(target) if score.integer else target
        if target == _SHARE_OFF:
            notes.append(f"{score.threshold}: a healthy trace reaches 1.0; the rule is off")
    longest = max(s.tokens for s in healthy)
    return proposed, _budget(budget, longest, margin, may_lower), notes


def _budget(budget: int | None, longest: int, margin: float, may_lower: bool) -> int | None:
    """The proposed thinking budget (see :func:`propose`)."""
    target = math.ceil(longest * margin / BUDGET_STEP) * BUDGET_STEP
    if budget is None:
        return target if may_lower else None
    if budget <= target or not may_lower:
        return max(budget, target)
    return max(target, math.ceil(budget / 2 / BUDGET_STEP) * BUDGET_STEP)


def prove(items: Sequence[Scored], config: DetectorConfig, proposed: dict[str, Any],
          notes: list[str]) -> dict[str, ReplayResult]:
    """Switch off, in ``proposed``, each detector that still fires on a healthy trace with
    it (see the module docstring); return the replays of ``items`` with the result."""
    for _ in range(16):
        cfg = dataclasses.replace(config, **proposed, thinking_token_budget=None,
                                  thinking_seconds_budget=None)
        replays = {s.trace.id: (s.current if cfg == _textual(config)
                                else replay_record(s.trace.record, cfg)) for s in items}
        fired = [(s, replays[s.trace.id]) for s in items
                 if s.label == "healthy" and replays[s.trace.id].detected]
        if not fired:
            return replays
        s, r = fired[0]
        off = "content_enabled" if r.channel == "content" else f"{r.detector}_enabled"
        proposed[off] = False
        notes.append(f"{off} = false: {r.detector} fired on healthy trace {s.trace.id} "
                     f"({r.channel}, character {r.at_char}) by a rule with no calibrated "
                     "threshold")
    raise RuntimeError("calibration could not keep the healthy traces from firing")


def _textual(config: DetectorConfig) -> DetectorConfig:
    return dataclasses.replace(config, thinking_token_budget=None, thinking_seconds_budget=None)


def calibrate(traces: Sequence[Trace], settings: Callable[[str], tuple[DetectorConfig,
                                                                        int | None]], *,
              margin: float = MARGIN, min_healthy: int = MIN_HEALTHY) -> list[ModelReport]:
    """One report per model of the labelled ``traces``; ``settings(model)`` gives the
    model's detector settings and thinking-token budget in force."""
    if margin <= 1:
        raise ValueError("margin must be above 1")
    models = sorted({t.model for t in traces if t.label is not None})
    reports = []
    for model in models:
        config, budget = settings(model)
        mine = [t for t in traces if t.model == model]
        items = [scored(t, config) for t in mine if t.label in ("loop", "healthy")]
        healthy = [s for s in items if s.label == "healthy"]
        keys = healthy[0].scores.values if healthy else {}
        maxima = {k: max(s.scores.maxima()[k] for s in healthy) for k in keys}
        current = outcome(items, {s.trace.id: s.current for s in items}, budget)
        proposed, new_budget, notes = propose(items, config, budget, margin=margin,
                                              min_healthy=min_healthy)
        replays = prove(items, config, proposed, notes)
        reports.append(ModelReport(
            model, items, [t for t in mine if t.label == "ambiguous"], config, budget,
            maxima, max((s.tokens for s in healthy), default=0), current, proposed,
            new_budget, outcome(items, replays, new_budget), notes))
    return reports


def toml_entry(report: ModelReport, margin: float) -> str:
    """The proposed ``[[models]]`` entry, commented with its margins."""
    lines = ["[[models]]", f"match = {_toml_str('^' + regex_literal(report.model) + '$')}"]
    if report.proposed_budget is not None:
        lines.append(f"thinking_token_budget = {report.proposed_budget}")
    if report.proposed:
        items = ", ".join(f"{k} = {_toml_value(v)}" for k, v in sorted(report.proposed.items()))
        lines.append(f"detectors = {{ {items} }}")
    if not report.healthy:
        return "\n".join([*lines, "# no healthy trace of this model: nothing to propose"]) + "\n"
    lines.append(f"# over the highest values of {report.healthy} healthy traces "
                 f"(target x{margin:g}):")
    for key, m in report.margins(proposal=True).items():
        value = m["value"]
        kept = "-" if m["margin"] is None else f"x{m['margin']:g}"
        lines.append(f"#   {key}: {number(value)} over {number(m['healthy_max'])} ({kept})")
    lines += [f"# {note}" for note in report.notes]
    return "\n".join(lines) + "\n"


def number(value: float | None) -> str:
    """A figure as the reports print it: an int with separators, a float with two
    decimals, None as off."""
    if value is None:
        return "off"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.2f}"


def regex_literal(text: str) -> str:
    """``text`` as a regex that matches it literally, escaping only what must be."""
    return re.sub(r"([\\.^$*+?{}\[\]|()])", r"\\\1", text)


def _toml_str(value: str) -> str:
    if "'" not in value and "\n" not in value:
        return f"'{value}'"
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)
