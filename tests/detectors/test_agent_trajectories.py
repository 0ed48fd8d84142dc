"""The agent-loop check on tests/data/agent-trajectories (issue 39's calibration targets)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from benchmarks.agent_loops import config_for, load, trailing
from detectors.agent_loops import KINDS, Event, LoopConfig, Reply, Step, UserTurn, check


@pytest.fixture(scope="module")
def records() -> list[dict[str, Any]]:
    """Every trajectory of the set, decoded."""
    return load()


def test_set_composition(records: list[dict[str, Any]]) -> None:
    """Each record names its source (repository, path, commit, license), an outcome, a
    label and the reason for it; the three labels are all present."""
    for rec in records:
        source = rec["source"]
        assert source["repository"]
        assert source["path"]
        assert len(source["commit"]) == 40
        assert source["license"] in ("MIT", "none stated")
        assert rec["outcome"]
        assert rec["label_reason"]
        assert rec["label"] in ("loop", "healthy", "no-loop")
    labels = [r["label"] for r in records]
    assert (labels.count("loop"), labels.count("healthy"), labels.count("no-loop")) == \
        (18, 84, 26)


_ARGUMENT = re.compile(r"a:[0-9a-f]{12}")
_RESULT = re.compile(r"r:[0-9a-f]{12}")
_TEXT = re.compile(r"[a-p]{8}|[a-p]{16}")
_NAME = re.compile(r"[A-Za-z_][\w.-]{0,31}|\(unlogged\)|n:[0-9a-f]{12}")


def test_unlicensed_records_hold_digests_only(records: list[dict[str, Any]]) -> None:
    """The records of a source with no license keep nothing verbatim: every argument,
    result and reply text is a digest (none longer than one), and a tool name is a plain
    identifier or a digest."""
    unlicensed = [r for r in records if r["source"]["license"] == "none stated"]
    assert len(unlicensed) == 106
    for rec in unlicensed:
        for event in rec["history"]:
            if isinstance(event, Step):
                assert _ARGUMENT.fullmatch(event.arguments), (rec["id"], event.index)
                assert event.result is None or _RESULT.fullmatch(str(event.result)), \
                    (rec["id"], event.index)
                assert _NAME.fullmatch(event.name), (rec["id"], event.index)
            elif isinstance(event, Reply):
                assert _TEXT.fullmatch(event.text), (rec["id"], event.index)


def identical_run(history: list[Event], end: int) -> int:
    """Reference: how many steps in a row, ending at ``history[end - 1]``, have the same
    name, arguments and result (a missing result matches nothing), user turns and replies
    between them skipped."""
    steps = [e for e in history[:end] if isinstance(e, Step)]
    if not steps or not isinstance(history[end - 1], Step) or steps[-1].result is None:
        return 0
    last, n = steps[-1], 0
    for s in reversed(steps):
        if (s.name, s.arguments, s.result) != (last.name, last.arguments, last.result):
            break
        n += 1
    return n


@pytest.mark.parametrize("k", [2, 3, 4, 5, 6])
def test_every_run_of_k_identical_calls_found(records: list[dict[str, Any]], k: int) -> None:
    """At every request of every trajectory whose trailing run of identical calls with
    identical results is K or longer, a repeat finding of exactly that count is made; and
    none is made where the run is shorter."""
    config = LoopConfig(repeat_min=k, cycle_min=30, text_min=30, window=90)
    runs = 0
    for rec in records:
        history = rec["history"]
        for end in range(1, len(history) + 1):
            if isinstance(history[end - 1], UserTurn):
                continue
            want = identical_run(history, end)
            found = [f for f in check(trailing(history, end, config.window), config)
                     if f.kind == "repeat"]
            if want >= k:
                runs += 1
                assert [f.count for f in found] == [want], (rec["id"], end)
            else:
                assert found == [], (rec["id"], end)
    assert runs > 0 or k > 3  # the set has runs of 2 and 3 (see the benchmark's table)


def test_no_false_alarm_on_successful_runs_at_the_defaults(
        records: list[dict[str, Any]]) -> None:
    """No request of any successful trajectory gives a finding of any kind at the shipped
    defaults, nor of the failed runs that were not loops."""
    config = LoopConfig()
    for rec in records:
        if rec["label"] == "loop":
            continue
        history = rec["history"]
        for end in range(1, len(history) + 1):
            assert check(trailing(history, end, config.window), config) == (), rec["id"]


def test_default_margin(records: list[dict[str, Any]]) -> None:
    """The defaults keep a margin over the successful runs: the longest identical run in
    them (4, SWE-agent's crypto/eps re-submitting a wrong flag) is two below repeat_min,
    and no cycle repeats twice in them."""
    healthy = [r for r in records if r["label"] == "healthy"]
    longest = max(identical_run(r["history"], end) for r in healthy
                  for end in range(1, len(r["history"]) + 1))
    assert longest == 4
    assert LoopConfig().repeat_min == longest + 2
    config = config_for("cycle", 2)
    assert not any(f.kind == "cycle" for r in healthy
                   for end in range(1, len(r["history"]) + 1)
                   for f in check(trailing(r["history"], end, config.window), config))
    assert LoopConfig().cycle_min == 3


def test_kinds_are_known() -> None:
    """The kinds the benchmark tabulates are the detector's."""
    assert KINDS == ("repeat", "cycle", "text")
