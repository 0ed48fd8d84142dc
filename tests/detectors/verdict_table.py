"""Where each detector fires on every trace of tests/data/traces: the table that pins them.

For every record of every ``*.jsonl`` file there, two things are recorded:

- ``chain``: the default chain's verdict, as :func:`detectors.replay.replay_record` gives it
  (detector, channel, at_token, at_char), or nothing;
- ``alone``: each text detector of the default config run on its own over each channel to
  the channel's end, and the channel offset of the end of the block of its first finding
  (``"thinking/recurrence": 5376``). The chain stops at its first verdict, so this shows
  every detector's own decision, the later ones included;
- ``near``: the same with :data:`NEAR`, thresholds about halfway to the defaults, so the
  table also pins how the evidence builds on the traces where nothing fires.

Only records with a verdict or a finding are written. ``tests/data/verdicts.json`` holds the
table; ``test_verdict_table.py`` checks that the detectors still produce it. A change that
moves a verdict on purpose rewrites it, and the diff shows what moved:

    .venv/bin/python tests/detectors/verdict_table.py --write
    .venv/bin/python tests/detectors/verdict_table.py     # prints the differences only
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from detectors import DetectorConfig
from detectors.blocks import Blocker
from detectors.chain import THINKING_ONLY, text_analyzers
from detectors.replay import replay_record, split_stream

DATA = Path(__file__).resolve().parent.parent / "data"
TRACES = DATA / "traces"
TABLE = DATA / "verdicts.json"

Row = dict[str, Any]

#: Lower thresholds: many more traces get a finding (see ``near`` in the module docstring).
NEAR = DetectorConfig(
    recurrence_threshold=0.6,
    recurrence_evidence=1.0,
    periodic_min_repeats=4,
    periodic_copy_chars=300,
    restatement_copies=4,
    sentences_repeat_chars=600,
    salad_run_tokens=240,
    symbol_run_tokens=40,
    script_mix=3,
)


def alone(record: dict[str, Any], config: DetectorConfig) -> dict[str, int]:
    """``"channel/detector"`` -> the channel offset where each text detector, run on its
    own to the channel's end, first finds something (channels as ``replay`` feeds them)."""
    text: str = record["text"]
    start, end, content_at = split_stream(text)
    factories = text_analyzers(config)
    found: dict[str, int] = {}
    for channel, part in (("thinking", text[start:end]), ("content", text[content_at:])):
        if channel == "content":
            if not config.content_enabled:
                break
            factories = tuple(f for f in factories if f[0] not in THINKING_ONLY)
        analyzers = [(name, make()) for name, make in factories]
        for block in Blocker().push(part) or []:
            for name, analyzer in analyzers:
                label = f"{channel}/{name}"
                if label not in found and analyzer.analyze(block) is not None:
                    found[label] = block.end
    return found


def row(record: dict[str, Any], config: DetectorConfig) -> Row:
    """The table's entry for one record (empty when nothing fires)."""
    out: Row = {}
    result = replay_record(record, config)
    if result.detected:
        out["chain"] = [result.detector, result.channel, result.at_token, result.at_char]
    for name, found in (("alone", alone(record, config)), ("near", alone(record, NEAR))):
        if found:
            out[name] = found
    return out


def table(config: DetectorConfig | None = None, part: tuple[str, int, int] | None = None,
          ) -> dict[str, Row]:
    """``"file:index"`` -> :func:`row`, for every record with a verdict or a finding; with
    ``part = (stem, start, stop)``, for records ``start`` to ``stop - 1`` of that file only."""
    config = config or DetectorConfig()
    out: dict[str, Row] = {}
    for path in sorted(TRACES.glob("*.jsonl")):
        if part is not None and path.stem != part[0]:
            continue
        start, stop = (0, None) if part is None else part[1:]
        with path.open(encoding="utf-8") as fh:
            for i, line in enumerate(fh):
                if i < start or (stop is not None and i >= stop):
                    continue
                entry = row(json.loads(line), config)
                if entry:
                    out[f"{path.stem}:{i}"] = entry
    return out


def parts(size: int) -> list[tuple[str, int, int]]:
    """Every trace file cut into runs of ``size`` records, ``(stem, start, stop)``: the
    table is checked a part at a time, each well within a test's timeout."""
    out = []
    for path in sorted(TRACES.glob("*.jsonl")):
        with path.open(encoding="utf-8") as fh:
            n = sum(1 for _ in fh)
        out += [(path.stem, i, min(i + size, n)) for i in range(0, n, size)]
    return out


def differences(old: dict[str, Row], new: dict[str, Row]) -> list[str]:
    """One line per record whose entry differs, ``key: old -> new``."""
    return [
        f"{key}: {old.get(key)} -> {new.get(key)}"
        for key in sorted(old.keys() | new.keys())
        if old.get(key) != new.get(key)
    ]


def dump(rows: dict[str, Row]) -> str:
    """The table file's text: one record a line, so a diff names the records that moved."""
    lines = [f"{json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in rows.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def main() -> None:
    rows = table()
    if "--write" in sys.argv[1:]:
        TABLE.write_text(dump(rows), encoding="utf-8")
        print(f"{TABLE}: {len(rows)} records")
        return
    old = json.loads(TABLE.read_text(encoding="utf-8"))
    lines = differences(old, rows)
    print("\n".join(lines) or "no differences")
    raise SystemExit(1 if lines else 0)


if __name__ == "__main__":
    main()
