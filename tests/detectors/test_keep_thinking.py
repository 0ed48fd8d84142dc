"""``Chain.keep_thinking``: the thinking text kept as its blocks are cut, for a trace
recorder; keeping changes no verdict, and any split of the deltas keeps the same text."""

from __future__ import annotations

import json
import random
from pathlib import Path

from detectors import DetectorConfig, default_chain
from detectors.replay import split_stream
from detectors.tokenize import split_deltas

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"


def reasoning(name: str, index: int) -> str:
    text = json.loads((TRACES / f"{name}.jsonl").read_text().splitlines()[index])["text"]
    start, end, _ = split_stream(text)
    return text[start:end]


def test_the_kept_text_is_the_text_fed_however_split() -> None:
    """Fed whole, one pseudo-token a delta or in random pieces, the kept text is the
    thinking text (to the limit), and the verdict is the one of a chain that keeps
    nothing."""
    text = reasoning("loops", -1)  # recurrence fires in it
    rng = random.Random(3)
    cuts = sorted(rng.sample(range(1, len(text)), 400))
    splits = [[text], split_deltas(text),
              [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]]
    plain = default_chain(DetectorConfig())
    for delta in split_deltas(text):
        if plain.think(delta, 1, 0.0):
            break
    assert plain.verdict is not None
    for deltas in splits:
        chain = default_chain(DetectorConfig(stall_seconds=None))
        keeper = chain.keep_thinking(10**6)
        assert keeper is not None
        verdict = None
        for delta in deltas:
            verdict = verdict or chain.think(delta, 1, 0.0)
            if verdict:
                break
        kept, seen = keeper.text()
        assert text.startswith(kept)
        assert len(kept) == seen == chain.chars
        assert (verdict and (verdict.detector, verdict.at_char)) == (
            plain.verdict and (plain.verdict.detector, plain.verdict.at_char))


def test_the_limit_and_the_answer() -> None:
    """Past ``limit`` characters the text is cut; the keeper keeps the thinking once the
    chain has moved on to the answer."""
    text = reasoning("healthy", 3)
    chain = default_chain(DetectorConfig())
    keeper = chain.keep_thinking(5_000)
    assert keeper is not None
    for delta in split_deltas(text):
        chain.think(delta, 1, 0.0)
    for delta in split_deltas("The answer. " * 200):
        chain.feed("content", delta, 1, 0.0)
    kept, seen = keeper.text()
    assert (kept, seen) == (text[:5_000], len(text))


def test_no_text_detector_no_keeper() -> None:
    """With no text detector on thinking, thinking is not cut into blocks: nothing to
    keep there."""
    off = DetectorConfig(recurrence_enabled=False, periodic_enabled=False,
                         restatement_enabled=False, sentences_enabled=False,
                         degeneration_enabled=False)
    assert default_chain(off).keep_thinking(100) is None
