"""Any split of the same text gives the same verdict (detector, channel, at_char)."""

from __future__ import annotations

import itertools

from detector_helpers import feed_pieces, feed_text, key, load
from hypothesis import given, settings
from hypothesis import strategies as st

from detectors.replay import split_stream


def _reasoning(record: dict[str, str], limit: int) -> str:
    start, end, _ = split_stream(record["text"])
    return record["text"][start:end][:limit]


LOOPS = load("loops")
# A verbatim loop (recurrence), sentences coming back in a shifting order (sentences), a
# Chinese degeneration and an English salad.
SAMPLES = [
    _reasoning(LOOPS[34], 9000),
    _reasoning(LOOPS[33], 12000),
    _reasoning(LOOPS[39], 14000),
    _reasoning(LOOPS[42], 12000),
    "数字" + "9" * 1500,
]
EXPECTED = [key(feed_text(text)) for text in SAMPLES]


def _split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def test_samples_fire() -> None:
    """Every sample used below really produces a verdict."""
    assert all(expected is not None for expected in EXPECTED)


def test_whole_and_char_by_char_agree() -> None:
    """Feeding a sample whole, or one character at a time, gives the token-split verdict."""
    for text, expected in zip(SAMPLES, EXPECTED, strict=True):
        assert key(feed_pieces([text])) == expected
        assert key(feed_pieces(list(text))) == expected


@settings(max_examples=40, deadline=None)
@given(st.integers(0, len(SAMPLES) - 1), st.lists(st.integers(0, 1 << 20), max_size=400))
def test_random_splits_agree(index: int, cuts: list[int]) -> None:
    """Random cut points anywhere (mid-word, mid-CJK run) never change the verdict."""
    assert key(feed_pieces(_split(SAMPLES[index], cuts))) == EXPECTED[index]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 1 << 20), max_size=200))
def test_healthy_stays_quiet_under_any_split(cuts: list[int]) -> None:
    """A healthy trace stays quiet however it is split."""
    text = _reasoning(load("healthy")[44], 30000)
    assert feed_pieces(_split(text, cuts)) is None
