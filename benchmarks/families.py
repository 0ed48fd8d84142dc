"""Leave one model family out: does detection hold on a family it was not calibrated on?

Run from the repository root: ``.venv/bin/python -m benchmarks.families [--json]``

Traces: ``loops.jsonl``, ``healthy.jsonl`` and ``added-healthy.jsonl`` of tests/data/traces
(``ambiguous`` traces are not scored). Each record's ``model`` is mapped to its family, a
model line as its publisher names it, whatever the size or the fine-tune (Qwen3, QwQ,
DeepSeek-R1 with its distills, DeepHermes, Nemotron, Grok, Claude, Gemini, ...).

The five thresholds that decide most verdicts are calibrated with the family left out, by
the rule the defaults follow:

- ``recurrence_evidence``: 1.43 times the highest accumulated evidence on the healthy traces
  of the other families (the default 2.0 is 1.43 times 1.40, the maximum over all of them);
- ``recurrence_threshold`` (the window rule): 1.30 times the highest window score on the
  healthy traces of the other families, at most 1 (the default 0.9 is 1.30 times 0.69);
- ``restatement_copies``: 3 more than the most copies of one statement within 16,384
  characters on the healthy traces of the other families (the default 8 is 5 + 3);
- ``periodic_copy_chars`` (the copy rule of the periodic tail): 1.47 times the longest
  stretch of thinking that repeats earlier text verbatim, outside code, on the healthy
  traces of the other families (``benchmarks.verbatim``; the default 600 is 1.47 times 408);
- ``sentences_repeat_chars``: 1.49 times the most characters of sentences and lines written
  before within one window, on the healthy traces of the other families (the default 1,200
  is 1.49 times 808, the maximum over all of them).

Then the left-out family is scored with those thresholds: its loops caught (all, and
``confidence: high``), its healthy traces flagged, and the median detection after the
labelled onset. The default thresholds are scored the same way, per family. A trace is
caught at the first of: the recurrence rules (evidence or window), the restatement count,
the copy rule, the sentences window, and the other text detectors (a replay with those four
off). Only the
reasoning is scored for the calibrated rules; the others see the answer too, as in
``replay``.

``--margins`` prints instead, per family, the highest value of each rule on its healthy
traces and the margin of the default threshold over it (threshold / maximum; for the
restatement count, threshold - maximum).
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.verbatim import code_mask, copies_of
from detectors import DetectorConfig
from detectors.blocks import Blocker
from detectors.periodic import PeriodicAnalyzer
from detectors.recurrence import RecurrenceAnalyzer
from detectors.replay import replay_record, split_stream
from detectors.restatement import RestatementAnalyzer
from detectors.sentences import SentencesAnalyzer

TRACES = Path(__file__).resolve().parent.parent / "tests" / "data" / "traces"
FILES = ("loops", "healthy", "added-healthy")
#: The margin of the default evidence threshold over the healthy maximum (2.0 / 1.40).
EVIDENCE_MARGIN = 1.43
#: The margin of the default window threshold over the healthy maximum (0.9 / 0.69).
WINDOW_MARGIN = 1.30
#: The margin of the default copy count over the healthy maximum (8 - 5).
COPIES_MARGIN = 3
#: The margin of the default copy rule over the longest healthy verbatim copy (600 / 408).
COPY_MARGIN = 1.47

#: The margin of the default sentences threshold over the healthy maximum (1,200 / 808).
SENTENCES_MARGIN = 1.49

#: (substring of the model name, lower-case) -> family, first match wins.
FAMILIES = (
    ("fuseo1", "FuseO1 (merge)"),
    ("qwq", "QwQ"),
    ("qwen3", "Qwen3"),
    ("deepseek", "DeepSeek-R1"),
    ("deephermes", "DeepHermes"),
    ("nemotron", "Nemotron"),
    ("grok", "Grok"),
    ("claude", "Claude"),
    ("gemini", "Gemini"),
    ("elyza", "ELYZA-Thinking"),
    ("llama-3.1-8b", "Llama-3.1 reasoning SFT"),
)


def family(model: str) -> str:
    """The family of a record's ``model`` (the model itself when no rule matches)."""
    low = model.lower()
    for part, name in FAMILIES:
        if part in low:
            return name
    return model


@dataclass
class Trace:
    """What the calibration needs of one trace."""

    family: str
    label: str
    confidence: str | None
    onset: int | None
    # Offsets in the text at each block end of the reasoning, with the recurrence evidence,
    # the window score, the most restatement copies so far, the periodic run's copy and the
    # most characters written before in one sentences window so far.
    blocks: list[tuple[int, float, float, int, int, int]]
    other: int | None  # where the other detectors fire (None: they do not)
    longest: int  # the longest verbatim copy in the reasoning, outside code (healthy only)


def _trace(record: dict[str, Any], config: DetectorConfig) -> Trace:
    text = record["text"]
    start, end, _ = split_stream(text)
    rec = RecurrenceAnalyzer(
        config.recurrence_shingle, config.recurrence_history, config.recurrence_min_seen,
        config.recurrence_window_blocks, 2.0, config.recurrence_drift,
        float("inf"), config.recurrence_code_min_seen,
    )
    res = RestatementAnalyzer(10**9, config.restatement_window_chars)
    per = PeriodicAnalyzer(10**9, config.periodic_min_span, config.periodic_max_period, 10**9)
    sen = SentencesAnalyzer(10**9, config.sentences_window_chars, config.sentences_min_chars)
    blocks = []
    for block in Blocker().push(text[start:end]) or ():
        rec.analyze(block)
        res.analyze(block)
        per.analyze(block)
        sen.analyze(block)
        blocks.append((start + block.end, rec.evidence, rec.window_score, res.most, per.copied,
                       sen.most))
    others = DetectorConfig(
        recurrence_enabled=False, restatement_enabled=False, periodic_copy_chars=0,
        sentences_enabled=False,
    )
    other = replay_record(record, others)
    onset = record.get("approx_loop_onset_char_in_text")
    longest = 0
    if record["label"] == "healthy":
        mask = code_mask(text[start:end])
        longest = max((c.copied for c in copies_of(text[start:end])
                       if 2 * sum(mask[c.at : c.at + c.copied]) < c.copied), default=0)
    return Trace(
        family(record["model"]), record["label"], record.get("confidence"),
        onset if isinstance(onset, int) else None, blocks,
        other.at_char if other.detected else None, longest,
    )


Thresholds = tuple[float, float, int, int, int]


def detected_at(trace: Trace, thresholds: Thresholds) -> int | None:
    """Where the chain with these thresholds fires first (None: it does not)."""
    evidence, window, copies, copy, repeated = thresholds
    for at, score, share, most, copied, said in trace.blocks:
        if (score >= evidence or share >= window or most >= copies or copied >= copy
                or said >= repeated):
            return at if trace.other is None else min(at, trace.other)
    return trace.other


def score(traces: list[Trace], thresholds: Thresholds) -> dict[str, Any]:
    """Recall, high-confidence recall, false alarms and median delay of ``traces``."""
    loops = [t for t in traces if t.label == "loop"]
    healthy = [t for t in traces if t.label == "healthy"]
    hits = [(t, detected_at(t, thresholds)) for t in loops]
    caught = [(t, at) for t, at in hits if at is not None]
    high = [t for t in loops if t.confidence == "high"]
    delays = [at - t.onset for t, at in caught if t.onset is not None]
    return {
        "loops": len(loops),
        "caught": len(caught),
        "high": len(high),
        "high_caught": sum(1 for t, at in hits if t.confidence == "high" and at is not None),
        "healthy": len(healthy),
        "false_alarms": sum(1 for t in healthy if detected_at(t, thresholds) is not None),
        "median_delay": statistics.median(delays) if delays else None,
    }


def maxima(traces: list[Trace]) -> tuple[float, float, int, int, int]:
    """The highest value of each rule on the healthy ``traces``: evidence, window score,
    statement copies, verbatim copy, characters written before in one sentences window."""
    healthy = [t for t in traces if t.label == "healthy"]
    return (
        max((b[1] for t in healthy for b in t.blocks), default=0.0),
        max((b[2] for t in healthy for b in t.blocks), default=0.0),
        max((b[3] for t in healthy for b in t.blocks), default=0),
        max((t.longest for t in healthy), default=0),
        max((b[5] for t in healthy for b in t.blocks), default=0),
    )


def calibrate(traces: list[Trace]) -> Thresholds:
    """The five thresholds, by the defaults' rule, from the healthy ``traces``."""
    top_score, top_share, top_copies, top_copy, top_said = maxima(traces)
    return (round(top_score * EVIDENCE_MARGIN, 2), round(min(1.0, top_share * WINDOW_MARGIN), 2),
            top_copies + COPIES_MARGIN, round(top_copy * COPY_MARGIN),
            round(top_said * SENTENCES_MARGIN))


def margins(traces: list[Trace], defaults: Thresholds) -> list[dict[str, Any]]:
    """Per family with healthy traces: each rule's healthy maximum and the default's margin
    over it (a ratio; a difference for the copies of a statement)."""
    rows = []
    for name in sorted({t.family for t in traces if t.label == "healthy"}):
        top = maxima([t for t in traces if t.family == name])
        rows.append({
            "family": name,
            "healthy": sum(1 for t in traces if t.family == name and t.label == "healthy"),
            "maxima": top,
            "margins": tuple(
                d - m if i == 2 else (round(d / m, 2) if m else None)
                for i, (d, m) in enumerate(zip(defaults, top, strict=True))
            ),
        })
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the table as JSON")
    parser.add_argument("--margins", action="store_true",
                        help="print each family's healthy maxima and the defaults' margins")
    args = parser.parse_args(argv)
    config = DetectorConfig()
    traces = []
    for name in FILES:
        with (TRACES / f"{name}.jsonl").open(encoding="utf-8") as fh:
            traces += [_trace(json.loads(line), config) for line in fh if line.strip()]
    names = sorted({t.family for t in traces})
    defaults = (config.recurrence_evidence, config.recurrence_threshold,
                config.restatement_copies, config.periodic_copy_chars,
                config.sentences_repeat_chars)
    if args.margins:
        return _print_margins(margins(traces, defaults), defaults, as_json=args.json)
    rows = []
    for name in names:
        rest = [t for t in traces if t.family != name]
        own = [t for t in traces if t.family == name]
        left_out = calibrate(rest)
        evidence, window, copies, copy, said = left_out
        rows.append({
            "family": name,
            "left_out": {"evidence": evidence, "window": window, "copies": copies,
                         "copy": copy, "sentences": said, **score(own, left_out)},
            "default": score(own, defaults),
        })
    pooled = score(traces, defaults)
    worst = [r for r in rows if r["left_out"]["loops"]]
    worst_recall = min(worst, key=lambda r: r["left_out"]["caught"] / r["left_out"]["loops"])
    worst_fa = max(rows, key=lambda r: r["left_out"]["false_alarms"])
    on_all = calibrate(traces)
    if args.json:
        print(json.dumps({"families": rows, "pooled_default": pooled,
                          "calibrated_on_all": on_all}, indent=1))
        return 0
    print(f"calibrated on all families: evidence, window, copies, copy, sentences {on_all} "
          f"(defaults {defaults})")
    print("| family | loops (high) | healthy | left out: evidence, window, copies, copy, "
          "sentences | "
          "caught | high caught | false alarms | median delay | default: caught | high | "
          "false alarms | median delay |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lo, d = r["left_out"], r["default"]
        print(f"| {r['family']} | {lo['loops']} ({lo['high']}) | {lo['healthy']} | "
              f"{lo['evidence']}, {lo['window']}, {lo['copies']}, {lo['copy']}, "
              f"{lo['sentences']} | "
              f"{lo['caught']} | {lo['high_caught']} | "
              f"{lo['false_alarms']} | {lo['median_delay']} | {d['caught']} | "
              f"{d['high_caught']} | {d['false_alarms']} | {d['median_delay']} |")
    lo = worst_recall["left_out"]
    print(f"worst family recall (left out): {worst_recall['family']} "
          f"{lo['caught']}/{lo['loops']}; most false alarms (left out): {worst_fa['family']} "
          f"{worst_fa['left_out']['false_alarms']}")
    print(f"pooled, default thresholds: {pooled}")
    return 0


def _print_margins(rows: list[dict[str, Any]], defaults: Thresholds, *, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"defaults": defaults, "families": rows}, indent=1))
        return 0
    names = ("evidence", "window", "copies", "copy", "sentences")
    print(f"defaults: {dict(zip(names, defaults, strict=True))}; a cell is the healthy "
          "maximum and, in brackets, the default's margin over it")
    print("| family | healthy | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for r in rows:
        cells = []
        for i, (top, margin) in enumerate(zip(r["maxima"], r["margins"], strict=True)):
            value = f"{top:.2f}" if isinstance(top, float) else f"{top:,}"
            shown = "-" if margin is None else (f"+{margin}" if i == 2 else f"x{margin}")
            cells.append(f"{value} ({shown})")
        print(f"| {r['family']} | {r['healthy']} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
