"""Every trace of tests/data/traces still draws the verdicts pinned in tests/data/verdicts.json."""

from __future__ import annotations

import json

from verdict_table import TABLE, differences, table


def test_every_trace_keeps_its_verdicts() -> None:
    """The default chain's verdict on each trace, and where each text detector alone first
    finds something at the default and at lower thresholds, are those in the table
    (rewrite it with ``verdict_table.py --write`` when a change moves them on purpose)."""
    pinned = json.loads(TABLE.read_text(encoding="utf-8"))
    rows = table()
    assert sum("chain" in row for row in rows.values()) >= 40  # the table is not empty
    assert differences(pinned, rows) == []
