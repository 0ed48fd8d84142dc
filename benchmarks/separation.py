"""Can a simple text signal catch the loops the default chain misses, with no false alarm?

Run from the repository root: ``.venv/bin/python -m benchmarks.separation``

The default chain misses some loop traces in ``tests/data/traces/loops.jsonl`` (mostly
``medium`` circular rumination that runs to the generation cap). This script replays every
loop and healthy trace through the default chain, keeps the missed loops, and scores each
trace's reasoning with candidate signals. Each score is the trace's worst moment (the
largest value reached anywhere in the stream), so a threshold on it is a detector that fires
once the score gets there. Per signal it prints:

- the healthy maximum: a threshold above it flags no healthy trace;
- the second healthy value: a threshold above it allows one false alarm (the #3 budget);
- how many missed loops score above each of the two.

Signals (all on the pseudo-tokens of :mod:`detectors.tokenize`, lower-cased):

- ``copied kK dD``: the recurrence detector's own accumulation (``RecurrenceAnalyzer``
  fed by a ``Blocker``, as in the chain) with shingles of K tokens (shorter shingles match
  paraphrase better), its default memory of 8,192 shingles and a drift of D:
  ``S = max(0, S + copied share - D)`` per 256-character block; a final partial block is
  not scored, as in the chain.
- ``stalled vocabulary``: 1 minus the share of new word types among 2,000 words, at its
  lowest over three windows in a row (late in a long trace few words are new).
- ``hedging``: "wait", "hmm", "alternatively", "maybe", "perhaps" per 100 words, over a
  sliding window of 2,000 words.
- ``restated line``: the restatement detector's own count, the most copies of one line (or
  one whole list) within 16,384 characters (``RestatementAnalyzer.most``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from detectors import DetectorConfig
from detectors.blocks import Blocker
from detectors.recurrence import RecurrenceAnalyzer
from detectors.replay import replay_record, split_stream
from detectors.restatement import RestatementAnalyzer
from detectors.tokenize import TOKEN_RE

TRACES = Path(__file__).resolve().parent.parent / "tests" / "data" / "traces"
HEDGES = frozenset({"wait", "hmm", "alternatively", "maybe", "perhaps"})


def reasoning(record: dict[str, Any]) -> str:
    """The reasoning part of a trace's text."""
    start, end, _ = split_stream(record["text"])
    return str(record["text"][start:end])


def copied(text: str, k: int, drift: float) -> float:
    """Largest accumulated copied-shingle evidence over the stream: the recurrence
    detector itself, with ``k``-token shingles and ``drift``, its rules never firing."""
    d = DetectorConfig()
    analyzer = RecurrenceAnalyzer(k, d.recurrence_history, d.recurrence_min_seen,
                                  d.recurrence_window_blocks, threshold=2.0, drift=drift,
                                  evidence=float("inf"),
                                  code_min_seen=d.recurrence_code_min_seen)
    top = 0.0
    for block in Blocker().push(text) or ():
        analyzer.analyze(block)
        top = max(top, analyzer.evidence)
    return top


def _words(text: str) -> list[str]:
    return [t for t in TOKEN_RE.findall(text.lower()) if t.isalpha()]


def stalled_vocabulary(text: str, window: int = 2000) -> float | None:
    """1 - the lowest three-window mean share of new word types (None: too short)."""
    seen: set[str] = set()
    rates: list[float] = []
    new = 0
    for i, word in enumerate(_words(text), 1):
        if word not in seen:
            seen.add(word)
            new += 1
        if i % window == 0:
            rates.append(new / window)
            new = 0
    rates = rates[2:]  # every trace starts by introducing its vocabulary
    if len(rates) < 3:
        return None
    return 1.0 - min(sum(rates[i : i + 3]) / 3 for i in range(len(rates) - 2))


def hedging(text: str, window: int = 2000) -> float | None:
    """Most hedging words per 100 words in any window of ``window`` words (None: shorter)."""
    words = _words(text)
    if len(words) < window:
        return None
    flags = [w in HEDGES for w in words]
    run = sum(flags[:window])
    top = run
    for i in range(window, len(flags)):
        run += flags[i] - flags[i - window]
        top = max(top, run)
    return 100.0 * top / window


def restated(text: str) -> float:
    """The most copies of one statement within the restatement window, over the stream."""
    analyzer = RestatementAnalyzer(10**9, DetectorConfig().restatement_window_chars)
    for block in Blocker().push(text) or ():
        analyzer.analyze(block)
    return float(analyzer.most)


def signals() -> dict[str, Callable[[str], float | None]]:
    """The candidate signals, by name."""
    out: dict[str, Callable[[str], float | None]] = {}
    for k in (3, 4, 5, 6, 8):
        for drift in (0.5, 0.6, 0.7, 0.8):
            out[f"copied k{k} d{drift}"] = lambda t, k=k, d=drift: copied(t, k, d)
    out["stalled vocabulary"] = stalled_vocabulary
    out["hedging"] = hedging
    out["restated line"] = restated
    return out


def load(name: str) -> list[dict[str, Any]]:
    """The records of one trace file."""
    with (TRACES / f"{name}.jsonl").open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the table as JSON")
    args = parser.parse_args(argv)
    config = DetectorConfig()
    loops = load("loops")
    missed = [r for r in loops if not replay_record(r, config).detected]
    healthy = load("healthy")
    missed_text = [reasoning(r) for r in missed]
    healthy_text = [reasoning(r) for r in healthy]
    rows = []
    for name, fn in signals().items():
        hs = sorted(v for v in map(fn, healthy_text) if v is not None)
        ms = [v for v in map(fn, missed_text) if v is not None]
        top, second = hs[-1], hs[-2]
        rows.append({"signal": name, "healthy_scored": len(hs), "missed_scored": len(ms),
                     "healthy_max": round(top, 3), "healthy_second": round(second, 3),
                     "missed_max": round(max(ms), 3) if ms else None,
                     "caught_no_false_alarm": sum(v > top for v in ms),
                     "caught_one_false_alarm": sum(v > second for v in ms)})
    if args.json:
        print(json.dumps({"missed_loops": len(missed), "loops": len(loops),
                          "healthy": len(healthy), "signals": rows}, indent=1))
        return 0
    print(f"default chain misses {len(missed)} of {len(loops)} loops; "
          f"{len(healthy)} healthy traces")
    print("| signal | healthy max | 2nd | missed max | caught, 0 FA | caught, 1 FA |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['signal']} | {r['healthy_max']} | {r['healthy_second']} | "
              f"{r['missed_max']} | {r['caught_no_false_alarm']}/{r['missed_scored']} | "
              f"{r['caught_one_false_alarm']}/{r['missed_scored']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
