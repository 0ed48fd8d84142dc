"""Every trace of tests/data/traces still draws the verdicts pinned in tests/data/verdicts.json."""

from __future__ import annotations

import json

import pytest
from verdict_table import TABLE, differences, parts, table

PARTS = parts(250)


@pytest.mark.parametrize("part", PARTS, ids=[f"{s}:{a}-{b}" for s, a, b in PARTS])
def test_every_trace_keeps_its_verdicts(part: tuple[str, int, int]) -> None:
    """The default chain's verdict on each trace, and where each text detector alone first
    finds something at the default and at lower thresholds, are those in the table
    (rewrite it with ``verdict_table.py --write`` when a change moves them on purpose)."""
    stem, start, stop = part
    pinned = {
        key: value
        for key, value in json.loads(TABLE.read_text(encoding="utf-8")).items()
        if key.split(":")[0] == stem and start <= int(key.split(":")[1]) < stop
    }
    assert differences(pinned, table(part=part)) == []


def test_the_table_is_not_empty() -> None:
    """The pinned table holds the verdicts of the loops (a table emptied by mistake would
    pin nothing)."""
    pinned = json.loads(TABLE.read_text(encoding="utf-8"))
    assert sum("chain" in row for row in pinned.values()) >= 40
    assert {key.split(":")[0] for key in pinned} == {stem for stem, _, _ in PARTS}
