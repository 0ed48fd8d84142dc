"""The scores along a text (``detectors.scores``): the values the chain's rules compare
with their thresholds, read to the end of the text."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

from rumination import ruminate

from detectors import DetectorConfig
from detectors.chain import text_analyzers
from detectors.replay import replay_record, split_stream
from detectors.scores import SCORES, score_trace, unreachable

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"


def records(name: str) -> list[dict[str, object]]:
    with (TRACES / f"{name}.jsonl").open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def test_every_score_reads_its_detector_and_names_a_threshold() -> None:
    """Each registered score belongs to a detector of the default chain, reads a number
    from a fresh analyzer, and names a threshold field of ``DetectorConfig``."""
    analyzers = {name: make() for name, make in text_analyzers(DetectorConfig())}
    fields = {f.name for f in dataclasses.fields(DetectorConfig)}
    for score in SCORES:
        assert score.detector in analyzers, score
        assert isinstance(score.read(analyzers[score.detector]), (int, float))
        assert score.threshold in fields
    lifted = unreachable(DetectorConfig())
    assert all(getattr(lifted, s.threshold) == s.off for s in SCORES)


def test_the_scores_reach_a_threshold_where_the_chain_fires() -> None:
    """On every loop that a registered rule catches, the first block where a score
    reaches its threshold is where the chain's verdict is (offsets in the reasoning)."""
    config = DetectorConfig()
    registered = {s.detector for s in SCORES}
    checked = 0
    for record in records("loops"):
        result = replay_record(record, config)
        if result.detector not in registered or result.channel != "thinking":
            continue
        text = str(record["text"])
        start, end, _ = split_stream(text)
        trace = score_trace(text[start:end], config)
        first = min(at for s in SCORES
                    if (at := trace.first_reaching(s.key, getattr(config, s.threshold)))
                    is not None)
        assert result.at_char == start + first, record["source"]
        checked += 1
    assert checked >= 15


def test_scores_run_to_the_end_and_stay_under_the_thresholds_on_healthy_traces() -> None:
    """The values are read after every block to the end of the text; on the healthy
    traces none reaches its default threshold (the chain does not fire on them)."""
    config = DetectorConfig()
    for record in records("healthy")[:60]:
        text = str(record["text"])
        start, end, _ = split_stream(text)
        trace = score_trace(text[start:end], config)
        assert len(trace.ends) == (end - start) // 256
        assert all(len(v) == len(trace.ends) for v in trace.values.values())
        for s in SCORES:
            assert trace.maxima()[s.key] < getattr(config, s.threshold), record["source"]


def test_a_disabled_detector_has_no_scores() -> None:
    """Scores follow the config: a detector switched off is not run or read."""
    trace = score_trace("word " * 400, DetectorConfig(recurrence_enabled=False))
    assert not any(key.startswith("recurrence.") for key in trace.values)
    assert "sentences.repeated" in trace.values
    assert trace.first_reaching("recurrence.evidence", 0.0) is None


def test_the_sentences_score_is_where_sentences_fires_at_any_threshold() -> None:
    """On rumination built to the shape ``sentences`` was written for, its score first
    reaches ``sentences_repeat_chars`` exactly where the chain's verdict is, at the
    default threshold and at ones calibration may set (lower and higher)."""
    checked = set()
    for threshold in (700, 1200, 1800):
        config = DetectorConfig(sentences_repeat_chars=threshold, recurrence_enabled=False,
                                restatement_enabled=False, periodic_enabled=False)
        for seed, share in itertools.product(range(3), (0.3, 0.45, 0.6)):
            text, _ = ruminate(seed, share)
            trace = score_trace(text, config)
            result = replay_record({"text": "<think>" + text}, config)
            first = trace.first_reaching("sentences.repeated", threshold)
            if first is None:
                assert not result.detected, (threshold, seed, share)
                continue
            assert (result.detector, result.at_char) == ("sentences", len("<think>") + first)
            checked.add(threshold)
    assert checked == {700, 1200, 1800}
