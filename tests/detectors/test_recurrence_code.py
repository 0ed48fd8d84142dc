"""Code-aware recurrence: a bugfix session may repeat a function; a runaway keeps doing it."""

from __future__ import annotations

import pytest
from code_samples import MERGE, RATE_LIMITS, bugfix_session, rewrite_loop
from detector_helpers import feed_pieces, feed_text, key

from detectors import Channel, DetectorConfig, Verdict, default_chain
from detectors.blocks import Blocker
from detectors.recurrence import RecurrenceAnalyzer
from detectors.tokenize import split_deltas


def _session(thinking: str, content: str, config: DetectorConfig) -> Verdict | None:
    """Feed thinking, then content, one pseudo-token per delta, into one chain."""
    chain = default_chain(config)
    channels: list[tuple[Channel, str]] = [("thinking", thinking), ("content", content)]
    for channel, text in channels:
        for i, piece in enumerate(split_deltas(text)):
            verdict = chain.feed(channel, piece, 1, i * 0.01)
            if verdict is not None:
                return verdict
    return None


def _peaks(text: str, config: DetectorConfig) -> tuple[float, float]:
    """Highest accumulated evidence and highest window score over ``text``."""
    analyzer = RecurrenceAnalyzer(
        config.recurrence_shingle,
        config.recurrence_history,
        config.recurrence_min_seen,
        config.recurrence_window_blocks,
        2.0,
        config.recurrence_drift,
        float("inf"),
        config.recurrence_code_min_seen,
    )
    evidence = window = 0.0
    for block in Blocker().push(text) or []:
        assert analyzer.analyze(block) is None
        evidence = max(evidence, analyzer.evidence)
        window = max(window, analyzer.window_score)
    return evidence, window


@pytest.mark.parametrize("fences", [True, False])
def test_quote_and_rewrite_is_quiet(fences: bool) -> None:
    """Quoting a 38-line function, reasoning, rewriting it with a one-line fix, then
    showing it again in the answer: no verdict, and no evidence at all in thinking."""
    assert RATE_LIMITS.count("\n") == 38
    thinking, content = bugfix_session(recheck=False, fences=fences)
    config = DetectorConfig()
    assert _session(thinking, content, config) is None
    evidence, window = _peaks(thinking, config)
    assert evidence < config.recurrence_evidence / 4
    assert window < config.recurrence_threshold / 2


def test_quote_and_rewrite_fired_before_code_awareness() -> None:
    """The same session fires when code counts like prose (the risk this rule removes)."""
    thinking, content = bugfix_session(recheck=False)
    verdict = _session(thinking, content, DetectorConfig(recurrence_code_min_seen=1))
    assert verdict is not None
    assert (verdict.detector, verdict.channel) == ("recurrence", "thinking")


@pytest.mark.parametrize("fences", [True, False])
def test_recheck_third_copy_is_quiet(fences: bool) -> None:
    """Quote, fix, then the whole function put together once more with a second edit to
    re-check it: three near-verbatim copies in thinking, still healthy, with margin."""
    thinking, content = bugfix_session(recheck=True, fences=fences)
    config = DetectorConfig()
    assert _session(thinking, content, config) is None
    evidence, window = _peaks(thinking, config)
    assert evidence < config.recurrence_evidence / 4
    assert window < config.recurrence_threshold / 2


def test_recheck_third_copy_fires_if_code_counts_from_its_third_copy() -> None:
    """With code counted from its third copy, the re-check fires: the default needs a
    fourth."""
    thinking, content = bugfix_session(recheck=True)
    verdict = _session(thinking, content, DetectorConfig(recurrence_code_min_seen=2))
    assert verdict is not None
    assert verdict.detector == "recurrence"


def test_rewrite_loop_fires_during_fourth_copy() -> None:
    """A runaway that rewrites the same 34-line code after "Wait, let me rewrite it" fires
    during its fourth copy, whatever the chunking."""
    assert MERGE.count("\n") == 34
    text, starts = rewrite_loop(7)
    verdict = feed_text(text)
    assert verdict is not None
    assert verdict.detector == "recurrence"
    assert starts[3] < verdict.at_char < starts[4]
    assert key(feed_pieces([text])) == key(verdict)
    assert key(feed_pieces(list(text))) == key(verdict)


def test_rewrite_loop_without_fences_fires_too() -> None:
    """The same loop written as bare indented code fires in its fourth or fifth copy."""
    text, _ = rewrite_loop(7)
    bare = text.replace("```python\n", "").replace("```\n", "")
    starts = [i for i in range(len(bare)) if bare.startswith(MERGE, i)]
    verdict = feed_text(bare)
    assert verdict is not None
    assert verdict.detector == "recurrence"
    assert starts[3] < verdict.at_char < starts[5]


def test_prose_copy_still_counts_after_code() -> None:
    """After a closed fence, a paragraph copied twice more still accumulates as prose."""
    thinking, _ = bugfix_session(recheck=False)
    paragraph = thinking[thinking.index("Then for each") :][:1400]
    verdict = feed_text(thinking + paragraph * 2)
    assert verdict is not None
    assert "accumulating" in verdict.reason


def test_fence_split_across_blocks() -> None:
    """A fence whose backticks straddle a block boundary still opens: the quote and the
    rewrite stay quiet wherever the 256-character blocks fall."""
    thinking, content = bugfix_session(recheck=True)
    for pad in range(0, 256, 37):
        assert _session(" " * pad + thinking, content, DetectorConfig()) is None
