"""The periodic-tail analyzer keeps a short window but counts whole runs.

The reference here is the rule the analyzer implements, computed on the channel's whole
text at every block: the nearest earlier copy of the last 32 characters gives the period,
and the span is the exact length of the verbatim run of that period (no window at all).
"""

from __future__ import annotations

import random

import pytest
from code_samples import MERGE
from hypothesis import given, settings
from hypothesis import strategies as st

from detectors.blocks import BLOCK_CHARS, Blocker
from detectors.periodic import PeriodicAnalyzer, periodic_span

MIN_REPEATS, MIN_SPAN, MAX_PERIOD = 8, 400, 1024


def _run(text: str, max_period: int = MAX_PERIOD,
         min_repeats: int = MIN_REPEATS) -> list[tuple[int, int, int] | None]:
    """(end, period, repeats) of the analyzer's finding at each block, or None."""
    analyzer = PeriodicAnalyzer(min_repeats, MIN_SPAN, max_period)
    out: list[tuple[int, int, int] | None] = []
    for block in Blocker().push(text) or []:
        found = analyzer.analyze(block)
        out.append(None if found is None else
                   (block.end, found.evidence.period, found.evidence.count))
    return out


def _reference(text: str, max_period: int = MAX_PERIOD,
               min_repeats: int = MIN_REPEATS) -> list[tuple[int, int, int] | None]:
    out: list[tuple[int, int, int] | None] = []
    for end in range(BLOCK_CHARS, len(text) + 1, BLOCK_CHARS):
        p, span = periodic_span(text[:end], max_period)
        fires = p and span >= MIN_SPAN and span >= min_repeats * p
        out.append((end, p, span // p) if fires else None)
    return out


def _is_run(text: str, end: int, period: int, repeats: int) -> bool:
    """Whether ``text[:end]`` really ends in ``repeats`` copies of a ``period`` unit."""
    span = period * repeats
    head = text[:end]
    return span <= end and head[end - span + period :] == head[end - span : end - period]


def test_a_run_longer_than_the_window_keeps_its_count() -> None:
    """A 1,000-character unit repeated verbatim fires at its eighth copy (8,000 characters,
    six times the 1,312-character window), with the same count as the whole-text rule."""
    rng = random.Random(7)
    unit = "".join(rng.choice("abcdefghij klmnop\n") for _ in range(1000))
    text = "Start of the reasoning. " * 20 + unit * 10
    got, ref = _run(text), _reference(text)
    first = next(f for f in got if f)
    assert first == next(f for f in ref if f)
    assert first[1:] == (1000, 8)
    assert got == ref


def test_the_window_stays_short() -> None:
    """Whatever the text's length, the analyzer holds max_period + 288 characters."""
    analyzer = PeriodicAnalyzer(MIN_REPEATS, MIN_SPAN, MAX_PERIOD)
    text = "".join(f"no loop here, just text number {i}. " for i in range(2000))
    for block in Blocker().push(text) or []:
        analyzer.analyze(block)
    assert len(analyzer._recent) == MAX_PERIOD + BLOCK_CHARS + 32


def test_characters_beyond_the_bmp_keep_the_window_narrow_and_the_runs_true() -> None:
    """Emoji and other characters beyond U+FFFF are held at two bytes a character (a str
    with one of them takes four for every character), and the findings are those of the
    whole-text rule on the text itself: distinct emoji stay distinct (a two-emoji unit
    has period 2), and the unit in the evidence is the text's own."""
    x = "\U0001d465"  # MATHEMATICAL ITALIC SMALL X
    unit = f"Fix 🐛 then test ✅ then ship 🚀, and again: {x} = {x} + 1. 😀😁"
    text = "".join(f"Plan {i} with emoji 🎉 and math {x}. " for i in range(40)) + unit * 30
    assert _run(text) == _reference(text)
    analyzer = PeriodicAnalyzer(MIN_REPEATS, MIN_SPAN, MAX_PERIOD)
    found = [f for b in Blocker().push(text) or [] if (f := analyzer.analyze(b))]
    assert found[0].evidence.period == len(unit)
    # The unit as the block ends it (a rotation), single-spaced by ``excerpt``.
    quoted = found[0].evidence.excerpt
    assert quoted.replace(" ", "") in (unit * 2).replace(" ", "")
    assert "🚀" in quoted
    assert x in quoted
    assert len(analyzer._recent.encode("utf-16-le", "surrogatepass")) == 2 * len(
        analyzer._recent)  # no character needs a surrogate pair: none beyond U+FFFF
    pair = "😀😁" * 400
    assert _run(pair) == _reference(pair)
    assert next(f for f in _run(pair) if f)[1] == 2


def test_a_nearer_copy_inside_the_unit_does_not_lose_the_run() -> None:
    """A unit that is mostly 'ab' repeated, with one mark: where the anchor falls in the
    'abab' part its nearest copy is 2 characters back, a short run. The followed run of
    the real period keeps its count, so the loop fires; the whole-text rule, which only
    asks the nearest copy, fires later if at all (here: not in 12 copies)."""
    unit = "ab" * 150 + "X"  # period 301
    text = "Some reasoning first, then it loops.\n" * 10 + unit * 12
    got, ref = _run(text), _reference(text)
    first = next(i for i, f in enumerate(got) if f)
    assert first <= next((i for i, f in enumerate(ref) if f), len(ref))
    end, period, repeats = got[first]  # type: ignore[misc]
    assert period == len(unit)
    assert repeats >= MIN_REPEATS
    assert _is_run(text, end, period, repeats)


def test_a_broken_run_starts_over() -> None:
    """A changed character ends the run: the loop after it is counted from its own start,
    as the whole-text rule counts it."""
    unit = "Let me recount the apples once more. "  # 37 characters
    text = unit * 12 + "But wait, the pears! " + unit * 30
    got = _run(text)
    assert got == _reference(text)
    after = [f for f in got if f and f[0] > len(unit * 12) + 21 + 256]
    assert after
    assert all(f[2] * f[1] <= f[0] - len(unit * 12) for f in after)


@settings(max_examples=150, deadline=None)
@given(
    prefix=st.text(alphabet="abc xyz.\n", max_size=600),
    pieces=st.lists(
        st.tuples(st.text(alphabet="abXc\n ", min_size=1, max_size=400),
                  st.integers(min_value=1, max_value=40)),
        min_size=1, max_size=5),
    max_period=st.sampled_from([64, 300, 1024]),
    min_repeats=st.sampled_from([2, 4, 8]),
)
def test_findings_are_true_and_never_later_than_the_whole_text_rule(
        prefix: str, pieces: list[tuple[str, int]], max_period: int, min_repeats: int) -> None:
    """Every finding is a real verbatim run of the claimed period and count, and at each
    block where the whole-text rule fires, the analyzer fires too."""
    text = prefix + "".join(unit * times for unit, times in pieces)
    got = _run(text, max_period, min_repeats)
    ref = _reference(text, max_period, min_repeats)
    assert len(got) == len(ref)
    for mine, theirs in zip(got, ref, strict=True):
        if theirs is not None:
            assert mine is not None
            assert mine[2] >= theirs[2] or mine[1] != theirs[1]
        if mine is not None:
            assert _is_run(text, *mine)
            assert mine[2] >= min_repeats
            assert mine[1] * (mine[2] + 1) > MIN_SPAN


def _prose(size: int, seed: int) -> str:
    """``size`` characters of words and sentences that never repeat a 32-character stretch."""
    rng = random.Random(seed)
    words = []
    while sum(map(len, words)) < size * 2:
        words.append("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(
            rng.randint(2, 9))) + rng.choice([" ", " ", " ", ". ", ", "]))
    return "".join(words)[:size]


def _copy_run(text: str, copy_chars: int) -> list[tuple[int, int, int] | None]:
    """(end, period, repeats) of each block's finding with the copy rule on, or None."""
    analyzer = PeriodicAnalyzer(MIN_REPEATS, MIN_SPAN, MAX_PERIOD, copy_chars)
    out: list[tuple[int, int, int] | None] = []
    for block in Blocker().push(text) or []:
        found = analyzer.analyze(block)
        out.append(None if found is None else
                   (block.end, found.evidence.period, found.evidence.count))
    return out


def _first(found: list[tuple[int, int, int] | None]) -> tuple[int, int, int] | None:
    return next((f for f in found if f), None)


@pytest.mark.parametrize(("size", "copies"), [(600, 2), (800, 2), (1000, 2), (300, 3), (200, 4)])
def test_copy_rule_fires_once_600_characters_are_copies(size: int, copies: int) -> None:
    """A unit of prose of 600 characters or more fires at the first block after its second
    copy is complete; a shorter one once 600 characters repeat the unit before them (a
    300-character unit after its third copy, a 200-character one after its fourth)."""
    head = _prose(3000, 1)
    unit = _prose(size, 2)
    text = head + unit * 12
    found = _first(_copy_run(text, 600))
    assert found is not None
    end, period, _ = found
    assert period == size
    due = len(head) + copies * size
    assert due <= end < due + BLOCK_CHARS
    assert _is_run(text, end, period, 2)


def test_copy_rule_waits_for_600_copied_characters() -> None:
    """A 250-character unit written three times (500 characters copied) draws no finding;
    without the copy rule a 600-character unit needs eight copies."""
    head = _prose(3000, 3)
    assert _first(_copy_run(head + _prose(250, 4) * 3 + head[:600], 600)) is None
    unit = _prose(600, 5)
    text = head + unit * 12
    found = _first(_copy_run(text, 0))
    assert found is not None
    assert found[0] >= len(head) + 8 * len(unit)


def test_a_paragraph_quoted_again_after_other_words_is_no_run() -> None:
    """A 900-character paragraph written again after a sentence of other words (a re-quote,
    not a loop) draws nothing: only consecutive copies make a run."""
    head = _prose(3000, 6)
    paragraph = _prose(900, 7)
    text = head + paragraph + "Let me read that once more, slowly: " + paragraph + head[:900]
    assert all(f is None for f in _copy_run(text, 600))


@pytest.mark.parametrize("fenced", [True, False])
def test_copy_rule_leaves_code_to_its_own_rule(fenced: bool) -> None:
    """A 34-line function written twice in a row, in a fence or as bare indented code, draws
    no finding from the copy rule (code keeps its own rule); the same characters as one
    long line of prose do."""
    head = _prose(3000, 8)
    code = f"```python\n{MERGE}```\n" if fenced else MERGE
    assert all(f is None for f in _copy_run(head + code * 3, 600))
    flat = MERGE.replace("\n", " ")
    assert _first(_copy_run(head + flat * 3, 600)) is not None


def test_copy_rule_is_off_inside_a_fence() -> None:
    """Inside an open fence a unit with no fence of its own is code too."""
    head = _prose(3000, 9) + "\n```\n"
    unit = _prose(700, 10)
    assert all(f is None for f in _copy_run(head + unit * 3, 600))
    assert _first(_copy_run(head + "```\n" + unit * 3, 600)) is not None


@settings(max_examples=150, deadline=None)
@given(
    prefix=st.text(alphabet="abc xyz.\n", max_size=600),
    pieces=st.lists(
        st.tuples(st.text(alphabet="abXc\n.", min_size=1, max_size=700),
                  st.integers(min_value=1, max_value=6)),
        min_size=1, max_size=4),
    copy_chars=st.sampled_from([100, 300, 600]),
)
def test_copy_findings_are_true_runs_and_never_late(
        prefix: str, pieces: list[tuple[str, int]], copy_chars: int) -> None:
    """With the copy rule on, every finding is a real verbatim run of at least two copies
    whose copied part covers ``copy_chars`` and the unit, and at each block where the
    whole-text rule (nearest period, copy rule included) fires, the analyzer fires too."""
    text = prefix + "".join(unit * times for unit, times in pieces)
    got = _copy_run(text, copy_chars)
    for end, mine in zip(range(BLOCK_CHARS, len(text) + 1, BLOCK_CHARS), got, strict=True):
        p, span = periodic_span(text[:end], MAX_PERIOD)
        whole = p and ((span >= MIN_SPAN and span >= MIN_REPEATS * p)
                       or span - p >= max(p, copy_chars))
        if whole:
            assert mine is not None
        if mine is not None:
            assert mine[0] == end
            assert mine[2] >= 2
            assert _is_run(text, *mine)


def test_copied_reports_the_prose_copy_of_a_run_and_nothing_for_code() -> None:
    """``copied`` is what the copy rule compares: 0 until the unit's second copy is
    complete, then the characters that repeat the text before them; 0 for code."""
    head = _prose(3000, 11)
    unit = _prose(500, 12)
    analyzer = PeriodicAnalyzer(MIN_REPEATS, MIN_SPAN, MAX_PERIOD, 10**9)
    seen = {}
    for block in Blocker().push(head + unit * 4) or []:
        assert analyzer.analyze(block) is None
        seen[block.end] = analyzer.copied
    assert all(v == 0 for end, v in seen.items() if end < len(head) + 2 * len(unit))
    last = max(seen)
    assert seen[last] == last - len(head) - len(unit)
    code = PeriodicAnalyzer(MIN_REPEATS, MIN_SPAN, MAX_PERIOD, 10**9)
    for block in Blocker().push(head + MERGE * 3) or []:
        code.analyze(block)
        assert code.copied == 0
