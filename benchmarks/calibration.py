"""Calibration held out: fit on half of each model's healthy traces, score on the rest.

Run from the repository root: ``.venv/bin/python -m benchmarks.calibration [--margin M]``

``runaway-sidecar calibrate`` proves its proposal on the healthy traces it was fitted
on; this says what the proposal does on healthy traces it never saw. The traces of
tests/data/traces (ambiguous ones aside) are treated as one operator's labelled traffic.
Each model's healthy traces are split in two by their order in the files (every other
one); the calibration sees the loops and the first half, and the proposal is then
replayed on the second half (its thresholds, and its budget against the pseudo-tokens
``replay`` counts). Printed per model with a proposal: the healthy traces fitted on and
held out, the held-out ones the proposal flags (and those the settings in force flag),
and the loops caught in force and with the proposal.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from detectors import DetectorConfig
from detectors.replay import replay_record
from sidecar.traces.calibrate import MIN_HEALTHY, calibrate
from sidecar.traces.store import Trace, load

TRACES = Path(__file__).resolve().parent.parent / "tests" / "data" / "traces"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--margin", type=float, default=1.5)
    parser.add_argument("--min-healthy", type=int, default=MIN_HEALTHY)
    args = parser.parse_args(argv)
    traces = [t for t in load(TRACES) if t.label in ("loop", "healthy")]
    fit: list[Trace] = []
    held: dict[str, list[Trace]] = {}
    seen: dict[str, int] = {}
    for t in traces:
        if t.label == "loop":
            fit.append(t)
            continue
        n = seen[t.model] = seen.get(t.model, 0) + 1
        (fit.append(t) if n % 2 else held.setdefault(t.model, []).append(t))
    reports = calibrate(fit, lambda m: (DetectorConfig(), None), margin=args.margin,
                        min_healthy=args.min_healthy // 2)
    print(f"margin x{args.margin:g}; a threshold is lowered with {args.min_healthy // 2} "
          "healthy traces fitted on (half of the command's default)")
    print("| model | healthy fitted | held out | held out flagged: in force | proposal | "
          "loops caught: in force | proposal |")
    print("|---|---|---|---|---|---|---|")
    totals = [0, 0, 0, 0]
    flagged: list[str] = []
    for r in reports:
        if not r.proposed and r.proposed_budget is None:
            continue
        config = dataclasses.replace(r.config, **r.proposed,
                                     thinking_token_budget=r.proposed_budget)
        out = held.get(r.model, [])
        before = sum(replay_record(t.record, DetectorConfig()).detected for t in out)
        results = [(t, replay_record(t.record, config)) for t in out]
        after = sum(x.detected for _, x in results)
        flagged += [f"{t.id} ({r.model}): {x.detector} at {x.at_char:,} of {x.chars:,}"
                    for t, x in results if x.detected]
        totals = [totals[0] + len(out), totals[1] + before, totals[2] + after,
                  totals[3] + r.current.loops]
        print(f"| {r.model} | {r.healthy} | {len(out)} | {before} | {after} | "
              f"{r.current.caught}/{r.current.loops} | {r.after.caught}/{r.after.loops} |")
    print(f"held out: {totals[0]} healthy traces, flagged {totals[1]} in force and "
          f"{totals[2]} with the proposals")
    for line in flagged:
        print(f"  flagged with the proposal: {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
