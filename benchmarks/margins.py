"""How close each label's traces come to the recurrence detector's two rules.

Run from the repository root: ``.venv/bin/python -m benchmarks.margins``

Every record of ``tests/data/traces/*.jsonl`` has its reasoning (the text before
``</think>``) fed, in 256-character blocks, to a :class:`RecurrenceAnalyzer` with the
default configuration and both rules disarmed. Per trace two scores are kept: the largest
accumulated evidence (the accumulation rule fires at ``recurrence_evidence``, 2.0) and the
largest window score once the window is full (the window rule fires at
``recurrence_threshold``, 0.9). Per label (healthy, ambiguous, loop) it prints the traces
with the largest scores: the healthy ones are the margin a change to the detector must keep.
``--json FILE`` also writes every trace's scores, to compare two builds trace by trace.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

from detectors import DetectorConfig
from detectors.blocks import Blocker
from detectors.chain import text_analyzers
from detectors.recurrence import RecurrenceAnalyzer

TRACES = Path(__file__).resolve().parent.parent / "tests" / "data" / "traces"


def scores(thinking: str, config: DetectorConfig) -> tuple[float, float]:
    """The largest accumulated evidence and the largest full-window score over ``thinking``."""
    disarmed = dataclasses.replace(config, recurrence_evidence=math.inf,
                                   recurrence_threshold=math.inf)
    analyzer = dict(text_analyzers(disarmed))["recurrence"]()  # as the chain builds it
    if not isinstance(analyzer, RecurrenceAnalyzer):
        raise TypeError(f"the recurrence factory made a {type(analyzer).__name__}")
    evidence = window = 0.0
    for block in Blocker().push(thinking) or ():
        analyzer.analyze(block)
        evidence = max(evidence, analyzer.evidence)
        window = max(window, analyzer.window_score)  # 0 until the window is full
    return evidence, window


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=3, help="traces listed per label and score")
    parser.add_argument("--json", type=Path, help="write every trace's scores to this file")
    args = parser.parse_args(argv)
    config = DetectorConfig()
    rows: dict[str, tuple[str, float, float]] = {}
    for path in sorted(TRACES.glob("*.jsonl")):
        with path.open(encoding="utf-8") as fh:
            for i, line in enumerate(fh):
                record = json.loads(line)
                evidence, window = scores(record["text"].split("</think>")[0], config)
                rows[f"{path.stem}:{i}"] = (record.get("label", "?"), evidence, window)
    for label in sorted({label for label, _, _ in rows.values()}):
        mine = {name: row for name, row in rows.items() if row[0] == label}
        print(f"{label}: {len(mine)} traces")
        for title, at in (("accumulated evidence", 1), ("window score", 2)):
            top = sorted(mine.items(), key=lambda item: item[1][at])[-args.top:]
            listed = ", ".join(f"{row[at]:.3f} ({name})" for name, row in reversed(top))
            print(f"  largest {title}: {listed}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=0), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
