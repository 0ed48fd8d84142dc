"""Replay over tests/data/traces: the targets of issue 3, and the CLI entry point."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from detector_helpers import TRACES, load

from detectors import DetectorConfig
from detectors.replay import ReplayResult, replay_record, split_stream, summarize
from sidecar.service.replay import run_replay


@pytest.fixture(scope="module")
def results() -> dict[str, list[ReplayResult]]:
    """Every trace of tests/data replayed once with the default config."""
    config = DetectorConfig()
    return {
        name: [
            replay_record(r, config, fallback_id=f"{name}:{i}")
            for i, r in enumerate(load(name))
        ]
        for name in ("loops", "healthy", "added-healthy")
    }


def test_high_confidence_recall(results: dict[str, list[ReplayResult]]) -> None:
    """Every confidence-high loop is caught (issue 28)."""
    assert summarize(results["loops"])["all"]["recall_high"] == 1.0


def test_false_alarms(results: dict[str, list[ReplayResult]]) -> None:
    """None of the 365 healthy traces is flagged (issue 28: 0 false alarms)."""
    assert len(results["healthy"]) == 365
    assert sum(r.detected for r in results["healthy"]) == 0


def test_no_false_alarm_on_the_added_healthy_traces(
    results: dict[str, list[ReplayResult]],
) -> None:
    """None of the 1,520 healthy traces added for issue 28 is flagged."""
    assert len(results["added-healthy"]) == 1520
    assert sum(r.detected for r in results["added-healthy"]) == 0


@pytest.mark.xfail(
    strict=True,
    reason="open: 53% (23/43); the 20 missed medium no-end loops score no higher than long healthy"
    " traces on every repetition or novelty measure tried, restated lines included (at most 7"
    " copies of a line within 16,384 characters, against 5 on healthy traces)",
)
def test_all_loops_recall(results: dict[str, list[ReplayResult]]) -> None:
    """Target: at least 90% of all loops are caught."""
    assert summarize(results["loops"])["all"]["recall"] >= 0.90


def test_detection_delay(results: dict[str, list[ReplayResult]]) -> None:
    """Target: median detection at most 1,000 characters after the marked onset. Met since
    issue 38 (``sentences``): 155, the two middle loops of the ten at -2,273 and 2,583; it
    was 2,427 before, and the one loop that moved the median, dh3-prev#29, now fires 8,481
    characters before its labelled onset (2,271 after it before), where the model already
    pours the same jug states in circles. A thin margin: it rests on that one trace."""
    assert summarize(results["loops"])["all"]["median_delay_chars"] <= 1000


@pytest.mark.xfail(
    strict=True,
    reason="open: 36% cut (34% before issue 38); the 20 uncaught medium no-end loops hold 37% of"
    " all loop reasoning",
)
def test_reasoning_cut_share(results: dict[str, list[ReplayResult]]) -> None:
    """Target: at least 45% of all loop reasoning is cut."""
    assert summarize(results["loops"])["all"]["reasoning_cut_share"] >= 0.45


def test_at_char_points_into_text() -> None:
    """at_char is an offset in the raw text, tags included, inside the reasoning."""
    record = {"text": "<think>\n" + "9" * 3000 + "\n</think>\n\nok", "label": "loop"}
    result = replay_record(record, DetectorConfig())
    assert result.detected
    assert result.at_char is not None
    start, end, _ = split_stream(record["text"])
    assert start < result.at_char <= end
    assert record["text"][result.at_char - 1] == "9"


def test_reasoning_and_content_fields() -> None:
    """Records with reasoning/content fields replay like raw text."""
    result = replay_record({"reasoning": "Fine.", "content": "9" * 3000}, DetectorConfig())
    assert (result.detected, result.channel, result.chars) == (True, "content", 3005)


def test_cli_json_shape(tmp_path: Path) -> None:
    """--json prints traces with the documented keys and a summary."""
    path = tmp_path / "t.jsonl"
    path.write_text(
        json.dumps({"id": "a", "label": "loop", "text": "<think>" + "ab" * 2000 + "</think>"})
        + "\n"
        + json.dumps({"id": "b", "label": "healthy", "reasoning": "short", "content": "ok"})
        + "\n",
        encoding="utf-8",
    )
    out = io.StringIO()
    assert run_replay(path, DetectorConfig(), as_json=True, out=out) == 0
    doc = json.loads(out.getvalue())
    assert [t["id"] for t in doc["traces"]] == ["a", "b"]
    assert set(doc["traces"][0]) == {
        "id", "label", "detected", "detector", "channel", "at_token", "at_char", "chars"
    }
    assert doc["summary"]["by_label"]["loop"]["recall"] == 1.0
    assert doc["summary"]["by_label"]["healthy"]["false_alarms"] == 0


def test_cli_human_table() -> None:
    """The human form lists every trace and a summary with recall and false alarms."""
    out = io.StringIO()
    assert run_replay(TRACES / "loops.jsonl", DetectorConfig(), as_json=False, out=out) == 0
    text = out.getvalue()
    assert "summary" in text
    assert "recall(high) 100.0%" in text


def test_cli_missing_file(tmp_path: Path) -> None:
    """A missing file is exit code 2 with a message naming it."""
    err = io.StringIO()
    rc = run_replay(tmp_path / "nope.jsonl", DetectorConfig(), as_json=False,
                    out=io.StringIO(), err=err)
    assert rc == 2
    assert "nope.jsonl" in err.getvalue()


def test_cli_bad_line(tmp_path: Path) -> None:
    """A bad JSON line is exit code 2 naming the line number."""
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "ok"}\n{not json\n', encoding="utf-8")
    err = io.StringIO()
    assert run_replay(path, DetectorConfig(), as_json=True, out=io.StringIO(), err=err) == 2
    assert ":2:" in err.getvalue()
