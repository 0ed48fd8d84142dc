"""The sentences detector: much of the recent thinking is sentences written before."""

from __future__ import annotations

import itertools
import random
import tracemalloc
from collections import Counter

import pytest
from code_samples import bugfix_session
from detector_helpers import feed_pieces, feed_text, key, load
from enumeration import prose, schedules
from hypothesis import given, settings
from hypothesis import strategies as st
from rumination import _CUT, ruminate, tail_shares

from detectors import DetectorConfig
from detectors.blocks import Blocker
from detectors.replay import split_stream
from detectors.sentences import HISTORY, MAX_SEGMENT, SentencesAnalyzer

#: The chain without the sentences detector: what caught these shapes before issue 38.
WITHOUT = DetectorConfig(sentences_enabled=False)
#: The chain with the sentences detector as its only repetition rule.
ONLY = DetectorConfig(recurrence_enabled=False, restatement_enabled=False, periodic_enabled=False)
DEFAULT = DetectorConfig()


def _most(text: str) -> int:
    """The most characters written before within one window, over ``text``."""
    analyzer = SentencesAnalyzer(10**9)
    for block in Blocker().push(text) or ():
        assert analyzer.analyze(block) is None
    return analyzer.most


def _reasoning(record: dict[str, str]) -> str:
    start, end, _ = split_stream(record["text"])
    return record["text"][start:end]


@pytest.mark.parametrize("share", [0.3, 0.4, 0.5, 0.6])
def test_rumination_fixtures_have_the_shape(share: float) -> None:
    """The fixtures below are the shape of the misses: every 4,000-character window of the
    rumination is within 5 points (7 above) of its share of sentences written before, and
    no sentence is written more than 5 times."""
    for seed in range(3):
        text, start = ruminate(seed, share)
        shares = tail_shares(text, start)
        assert len(shares) > 50
        assert share - 0.05 < min(shares)
        assert max(shares) < share + 0.07
        counts = Counter(s.strip() for s in _CUT.split(text[start:]) if s.strip())
        assert max(counts.values()) <= 5
        assert sum(1 for n in counts.values() if n >= 2) >= 20


@pytest.mark.parametrize("share", [0.3, 0.4, 0.5, 0.6])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rumination_fires(share: float, seed: int) -> None:
    """Sentences written 2 to 5 times each in a shifting order, with new sentences between,
    at 30 to 60% of the window, fire ``sentences`` within 8,000 characters of the first
    (two windows of rumination; one and a little more from 40% on); without it the chain
    misses them all."""
    text, start = ruminate(seed, share)
    verdict = feed_text(text)
    assert verdict is not None
    assert verdict.detector == "sentences"
    assert start < verdict.at_char < start + (8000 if share < 0.4 else 6000)
    assert feed_text(text, config=WITHOUT) is None


def test_sentences_written_once_again_stay_quiet() -> None:
    """The same shape at 20% of the window (a re-check here and there) draws no verdict."""
    for seed in range(3):
        text, start = ruminate(seed, 0.2)
        assert max(tail_shares(text, start)) < 0.26
        assert feed_text(text) is None


def test_the_healthy_traces_keep_a_margin_of_1_45() -> None:
    """On every healthy trace of tests/data/traces the most characters written before
    within one window stays under the threshold by a factor of 1.45 or more (the maximum
    is 808, by Claude 3.7; docs/detectors.md gives it per family)."""
    most = max(_most(_reasoning(r)) for name in ("healthy", "added-healthy") for r in load(name))
    assert 1.45 * most <= DEFAULT.sentences_repeat_chars
    assert most > 0.6 * DEFAULT.sentences_repeat_chars  # the data is what the margin is over


@pytest.mark.parametrize("lines", [True, False])
@pytest.mark.parametrize("seed", [None, 0, 1])
def test_candidate_schedules_in_prose_add_nothing(lines: bool, seed: int | None) -> None:
    """A puzzle search that writes candidate schedules as prose lines or sentences shares
    its steps across candidates ("A and B cross, 3 minutes.": 40% of every window or more
    is steps written before) while the totals differ: as with recurrence's list rule, those
    copies never add up."""
    order = None if seed is None else random.Random(seed).sample(list(schedules()), 108)
    text = prose(30_000, order, lines=lines)
    start = len(prose(1))
    assert min(tail_shares(text, start)) > 0.4
    assert _most(text) < DEFAULT.sentences_repeat_chars / 4
    assert feed_text(text, config=ONLY) is None


@pytest.mark.parametrize("lines", [True, False])
def test_the_same_candidate_in_prose_again_and_again_fires(lines: bool) -> None:
    """A search stuck on one schedule, writing its steps and total again with the same
    numbers among new sentences, is a loop: the candidate comes back whole, so it counts
    (recurrence and restatement, off here, fire on it too)."""
    moves = next(iter(schedules()))
    text = "".join(
        f"Attempt {i}, let me go over it once more.\n\n" + prose(1, [moves], lines=lines)
        .split("\n\n", 1)[1]
        for i in range(20)
    )
    verdict = feed_text(text, config=ONLY)
    assert verdict is not None
    assert verdict.detector == "sentences"


@pytest.mark.parametrize("fences", [True, False])
def test_quoted_and_rewritten_code_does_not_count(fences: bool) -> None:
    """A bugfix session quotes a 38-line function, rewrites it and checks it again: its
    code lines (fenced, or indented under a line ending in ":") are not compared."""
    thinking, _ = bugfix_session(recheck=True, fences=fences)
    assert _most(thinking) < DEFAULT.sentences_repeat_chars / 4


def test_watches_the_thinking_only() -> None:
    """An answer may restate its points: ``sentences`` does not watch the content."""
    text, _ = ruminate(0, 0.5)
    thinking = feed_text(text)
    assert thinking is not None
    assert thinking.detector == "sentences"
    content = feed_text(text, channel="content")
    assert content is None or content.detector != "sentences"


def test_evidence_names_a_sentence_written_before() -> None:
    """The verdict says how much of the window is copies and quotes one of them."""
    text, start = ruminate(1, 0.5)
    verdict = feed_text(text)
    assert verdict is not None
    assert "of the last 4096 characters are" in verdict.reason
    assert verdict.evidence.count >= 10
    quoted = verdict.evidence.excerpt
    assert len(quoted) >= 20
    assert text[start:].count(quoted) >= 2


def test_case_and_spacing_are_ignored() -> None:
    """Copies that differ only in case and spacing are copies."""
    text, start = ruminate(2, 0.5)
    head, tail = text[:start], text[start:]
    varied = "".join(
        c.upper() if i % 7 == 0 else c + (" " if c == "," else "") for i, c in enumerate(tail)
    )
    verdict = feed_text(head + varied)
    assert verdict is not None
    assert verdict.detector == "sentences"


def test_long_segments_are_not_carried() -> None:
    """A paragraph that never ends a sentence is not compared, and the analyzer carries at
    most MAX_SEGMENT characters of it from block to block."""
    words = [f"w{i}" for i in range(3000)]
    run = " ".join(words)
    analyzer = SentencesAnalyzer()
    for block in Blocker().push((run + ". ") * 4) or ():
        assert analyzer.analyze(block) is None
        assert len(analyzer._carry) <= MAX_SEGMENT + 256
    assert analyzer.most == 0


def test_memory_is_bounded() -> None:
    """After 200,000 characters of rumination the analyzer holds its fingerprint ring
    (HISTORY characters of 4 bytes) and less than 1.5 KiB more: the window's sums, the
    segment being written, the paragraph being read."""
    text = "".join(ruminate(seed, 0.4, 30_000)[0] for seed in range(7))
    blocks = Blocker().push(text) or []
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    analyzer = SentencesAnalyzer(10**9)
    for block in blocks:
        analyzer.analyze(block)
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert len(text) > 200_000
    assert len(analyzer._ring) == HISTORY
    assert held < 4 * HISTORY + 1536, held


def test_bad_settings_are_refused() -> None:
    """The window must be whole blocks and the thresholds positive."""
    with pytest.raises(ValueError, match="multiple of 256"):
        SentencesAnalyzer(window_chars=4000)
    with pytest.raises(ValueError, match="positive"):
        SentencesAnalyzer(repeat_chars=0)


def test_a_real_loop_fires_sentences_first() -> None:
    """Qwen3-30B-A3B coming back to its sentences (a confidence-high loop) is caught by
    ``sentences`` at 9,735 characters, 12,288 before ``recurrence`` (22,023)."""
    record = next(r for r in load("loops")
                  if r["source"].endswith("output_queries_q3_30ba3-think.json#34"))
    reasoning = _reasoning(record)
    verdict = feed_text(reasoning)
    assert verdict is not None
    assert verdict.detector == "sentences"
    without = feed_text(reasoning, config=WITHOUT)
    assert without is not None
    assert without.at_char - verdict.at_char > 10_000


SAMPLE, _ = ruminate(0, 0.4)
EXPECTED = key(feed_text(SAMPLE))


@pytest.mark.parametrize("size", [1, 7, 256, 4096])
def test_verdict_does_not_depend_on_chunking(size: int) -> None:
    """Fed in pieces of any size, the rumination draws the same verdict at the same char."""
    assert EXPECTED is not None
    assert EXPECTED[0] == "sentences"
    pieces = [SAMPLE[i : i + size] for i in range(0, len(SAMPLE), size)]
    assert key(feed_pieces(pieces)) == EXPECTED


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, len(SAMPLE)), max_size=300))
def test_random_splits_agree(cuts: list[int]) -> None:
    """Cut anywhere (mid-word, between a full stop and its space), the verdict holds."""
    bounds = [0, *sorted(set(cuts)), len(SAMPLE)]
    pieces = [SAMPLE[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    assert key(feed_pieces(pieces)) == EXPECTED
