"""The restatement detector: one statement written again and again, whatever is around it."""

from __future__ import annotations

import random
import re
import tracemalloc
from zlib import crc32

import pytest
from detector_helpers import feed_pieces, feed_text, key, load
from enumeration import inline, listed, prose, schedules
from hypothesis import given
from hypothesis import strategies as st

from detectors import DetectorConfig
from detectors.blocks import BLOCK_CHARS, Blocker
from detectors.replay import split_stream
from detectors.restatement import (
    _ASCII_WORDS,
    _ASCII_WORDS_WITH_DIGITS,
    MIN_WORDS,
    MIN_WORDS_WITH_DIGITS,
    RestatementAnalyzer,
)
from detectors.tokenize import split_deltas

FORMULA = "P = (R_planet / R_star) * (1 / (orbital period)) * (some factor)"

#: Varied sentences between the copies, none of them repeated (so per-block copied-shingle
#: evidence stays low, as in the rumination traces of issue 28).
LEADS = [
    "Alternatively, the transit probability is given by the formula:",
    "But I need to think of the actual formula.",
    "Maybe the probability depends on the stellar radius in another way.",
    "Hmm, the question gives the masses of both host stars, which must matter somehow.",
    "I recall that the geometric probability scales with the size of the star.",
    "Wait, perhaps I should consider the semi-major axis instead of the period.",
    "Kepler's third law relates the period to the distance from the star.",
    "So a shorter period means the planet is closer, which helps the transit.",
    "Let me look at the answer options again before going further.",
    "The first planet has an orbit three times shorter than the second one.",
    "Both stars seem to have the same radius according to the problem statement.",
    "If the radii are equal, only the orbital distance should change the result.",
    "That would make the ratio of probabilities depend on the period to some power.",
    "I am not sure whether the exponent is two thirds or one half here.",
    "Perhaps the answer expects a rough factor between two and three.",
    "Another approach would be to compare the impact parameters of the orbits.",
    "Circular orbits make the calculation simpler than it would otherwise be.",
    "The researchers want to observe the planet with the higher chance to transit.",
    "Let me reconsider the dependence of the probability on the host star mass.",
    "A heavier star with the same period pushes the planet to a wider orbit.",
]


def rumination(copies: int, line: str = FORMULA) -> str:
    """``copies`` copies of ``line``, each after a different sentence, as paragraphs."""
    return "".join(f"{LEADS[i % len(LEADS)]}\n\n{line}\n\n" for i in range(copies))


def test_restated_line_fires_on_the_eighth_copy() -> None:
    """A short line restated verbatim among varied sentences fires on its eighth copy."""
    text = rumination(12)
    verdict = feed_text(text)
    assert verdict is not None
    assert verdict.detector == "restatement"
    assert verdict.evidence.count == 8
    assert verdict.evidence.excerpt == FORMULA
    eighth = [i for i in range(len(text)) if text.startswith(FORMULA, i)][7]
    assert eighth < verdict.at_char <= eighth + len(FORMULA) + 1 + 256


def test_seven_copies_do_not_fire() -> None:
    """Seven copies of a line (the healthy traces reach five) are not a verdict."""
    assert feed_text(rumination(7) + "The answer is therefore B, a factor of about 2.7.\n") is None


def test_copies_outside_the_window_do_not_add_up() -> None:
    """Copies spread over more than 16,384 characters do not add up to a verdict."""

    def spacer(i: int) -> str:  # about 2,300 characters of new text
        return "".join(f"Step {j} brings new material number {j * 7} into the argument.\n"
                       for j in range(40 * i, 40 * i + 40))

    text = "".join(f"{LEADS[i]}\n\n{FORMULA}\n\n{spacer(i)}" for i in range(12))
    assert feed_text(text) is None


def test_enumerated_schedules_never_fire() -> None:
    """Candidate schedules whose items differ in names and numbers are not restatements."""
    config = DetectorConfig(recurrence_enabled=False)
    for text in (inline(60_000), listed(60_000)):
        assert feed_text(text, config=config) is None


@pytest.mark.parametrize("seed", [None, 0])
def test_candidate_schedules_in_prose_lines_never_fire(seed: int | None) -> None:
    """Candidates written as prose lines ("A and B cross, 3 minutes.") share their steps,
    and their total lines ("That makes 21 minutes in total, 4 too many.") come back with
    every candidate of the same total: a run of lines with numbers or one-letter names is
    read as one statement, as a list is, so they never add up (a total line fired at its
    8th copy, 9,216 characters in, when each line counted)."""
    order = None if seed is None else random.Random(seed).sample(list(schedules()), 108)
    config = DetectorConfig(recurrence_enabled=False, sentences_enabled=False)
    assert feed_text(prose(40_000, order), config=config) is None


def test_the_same_candidate_in_prose_lines_fires() -> None:
    """A search stuck on one schedule writes the same run of lines again and again: the
    run is the statement that comes back."""
    moves = next(iter(schedules()))
    text = "".join(f"Attempt {i}, let me go over it once more.\n\n"
                   + prose(1, [moves]).split("\n\n", 1)[1] for i in range(12))
    config = DetectorConfig(recurrence_enabled=False, sentences_enabled=False)
    verdict = feed_text(text, config=config)
    assert verdict is not None
    assert verdict.detector == "restatement"
    assert "a run of 7 lines" in verdict.reason


def test_a_long_run_of_figures_is_read_line_by_line() -> None:
    """Lines of figures with no blank line or prose between them, longer in all than a
    line may be, are no candidate: each counts on its own, so a figure restated among
    new ones still fires."""
    text = "".join(
        f"Check {i}: the pair gives {i * 7 % 23} and {i * 11 % 29} in all.\n"
        + ("So the total time is 17 minutes for the whole group.\n" if i % 3 == 0 else "")
        for i in range(60)
    )
    config = DetectorConfig(recurrence_enabled=False, sentences_enabled=False)
    verdict = feed_text(text, config=config)
    assert verdict is not None
    assert verdict.detector == "restatement"
    assert "a line was written 8 times" in verdict.reason


def test_short_lines_with_numbers_need_five_words() -> None:
    """A step line with a number ("A comes back (1, total 4).") may recur like a puzzle
    state; a line with a number and five words or more counts."""
    step = rumination(12, "A comes back (1, total 4).")
    assert feed_text(step) is None
    longer = rumination(12, "So the answer must be option 3, because the ratio is larger.")
    verdict = feed_text(longer)
    assert verdict is not None
    assert verdict.detector == "restatement"


def test_a_whole_list_restated_fires_and_a_changed_list_does_not() -> None:
    """Options re-enumerated verbatim count as one statement; lists that differ in one
    item never add up, however many items they share."""
    options = "A) 0.5 times\nB) 1.5 times\nC) 2.2 times\nD) 2.7 times\n"
    same = "".join(f"{LEADS[i]}\n\n{options}\n" for i in range(14))
    verdict = feed_text(same)
    assert verdict is not None
    assert verdict.detector == "restatement"
    assert "list of 4 items" in verdict.reason
    changed = "".join(
        f"{LEADS[i]}\n\n{options}E) {i + 3}.1 times\n\n" for i in range(14)
    )
    assert feed_text(changed) is None


def test_content_channel_is_not_watched() -> None:
    """An answer may write a line many times: restatement watches the thinking only."""
    text = rumination(12)
    config = DetectorConfig(recurrence_enabled=False)
    assert feed_text(text, channel="content", config=config) is None


@pytest.mark.parametrize("size", [1, 3, 17, 256, 1000])
def test_chunking_does_not_change_the_verdict(size: int) -> None:
    """Any split of the text into deltas gives the same verdict at the same character."""
    text = rumination(12)
    whole = key(feed_text(text))
    pieces = [text[i : i + size] for i in range(0, len(text), size)]
    assert key(feed_pieces(pieces)) == whole
    assert whole is not None


def test_long_lines_are_left_to_recurrence() -> None:
    """A line longer than 320 characters is a paragraph and is not counted."""
    paragraph = " ".join(LEADS[:6])  # about 370 characters
    analyzer = RestatementAnalyzer(copies=3)
    found = [analyzer.analyze(b) for b in Blocker().push((paragraph + "\n") * 6) or ()]
    assert not any(found)


def test_state_is_bounded() -> None:
    """The ring never holds more than 512 + 64 statements, whatever the stream's length."""
    analyzer = RestatementAnalyzer(copies=10**6)
    text = "".join(f"Line number {i} of a very long and never repeating stream.\n"
                   for i in range(5000))
    for block in Blocker().push(text) or ():
        analyzer.analyze(block)
    assert len(analyzer._ring_at) <= 576
    assert len(analyzer._counts) == 1024
    assert "".join(split_deltas(text)) == text


WORDS = ("apple", "river", "stone", "cloud", "ember", "field", "glass", "honey", "ivory",
         "jelly", "koala", "lemon", "maple", "noble", "ocean", "pearl", "quill", "raven")


def _churn(seed: int, lines: int, vocabulary: int, window: int) -> tuple[str, list[int]]:
    """``lines`` lines drawn at random from ``vocabulary`` distinct statements (no digits,
    five words or more): the text, and each line's channel offset."""
    rng = random.Random(seed)
    pool = [f"we check the {WORDS[i % 18]} {WORDS[i // 18 % 18]} and {WORDS[i // 324 % 18]} "
            f"{WORDS[(i * 7) % 18]} again" for i in range(vocabulary)]
    text, starts = "", []
    for _ in range(lines):
        starts.append(len(text))
        text += rng.choice(pool) + "\n"
    return text, starts


def _first_copies(text: str, starts: list[int], window: int, copies: int) -> int | None:
    """The index of the 256-character block in which some statement reaches ``copies``
    copies within ``window`` characters and the last 512 statements, counted naively."""
    ring: list[tuple[str, int]] = []
    for line, start in zip(text.split("\n"), starts, strict=False):
        ring = [(h, at) for h, at in ring if at >= start - window][-511:]
        if 1 + sum(h == line for h, _ in ring) >= copies:
            return (start + len(line)) // BLOCK_CHARS  # where its line break is
        ring.append((line, start))
    return None


@pytest.mark.parametrize("seed", range(4))
def test_counts_are_exact_under_expiry_and_growth(seed: int) -> None:
    """Every statement's count is its copies in the window, whatever expired before it:
    a slot freed by expiry does not cut a probe run (the table once lost counts there),
    and the table's growth keeps every count. Hundreds of statements churn through a
    window that holds about 250 of them; at every threshold the detector fires in the
    block where a naive count first reaches it."""
    window = 8192
    text, starts = _churn(seed, 4000, 200 + 100 * seed, window)
    for copies in range(3, 9):
        analyzer = RestatementAnalyzer(copies=copies, window_chars=window)
        fired = next((i for i, block in enumerate(Blocker().push(text) or ())
                      if analyzer.analyze(block) is not None), None)
        assert fired == _first_copies(text, starts, window, copies), copies


def test_a_slot_freed_by_expiry_keeps_the_next_statement_counted() -> None:
    """Statements A and B share a home slot, so B is counted in the slot after A's. When A
    leaves the window, B's copies still count: here B's second copy fires at two copies.
    (The table used to free A's slot and cut B's probe run there: B's second copy started
    a new count at 1.)"""
    lines = (f"we check the {a} {b} and {c} again" for a in WORDS for b in WORDS for c in WORDS)
    homes: dict[int, str] = {}
    for line in lines:
        first = homes.setdefault(crc32(line.encode()) & 1023, line)  # same slot in any size
        if first != line:
            break
    a, b = first, line
    window = 4096
    text = f"{a}\n{b}\n"
    filler = window + 1 - len(text)  # B's second copy starts at window + 1: A is gone, B not
    text += "ok\n" * (filler // 3) + "o" * (filler % 3 - 1) + "\n" * (filler % 3 > 0)
    assert len(text) == window + 1
    text += f"{b}\n" + " " * BLOCK_CHARS
    analyzer = RestatementAnalyzer(copies=2, window_chars=window)
    found = [f for block in Blocker().push(text) or () if (f := analyzer.analyze(block))]
    assert len(found) == 1
    assert found[0].evidence.excerpt.startswith(b[:20])


def test_the_table_grows_with_the_statements_in_the_window() -> None:
    """A channel with a few statements in its window keeps a small table, at least twice
    as large as its ring: 64 slots for up to 32 (a full ring has 1,024: see above)."""
    for lines, slots in ((32, 64), (33, 128), (64, 128), (65, 256)):
        analyzer = RestatementAnalyzer(copies=10**6)
        text = "".join(f"we check the {WORDS[i % 18]} and the {WORDS[i // 18 % 18]} again\n"
                       for i in range(lines))
        for block in Blocker().push(text + " " * 256) or ():
            analyzer.analyze(block)
        assert len(analyzer._ring_at) == lines
        assert len(analyzer._counts) == slots, lines


def _reasoning_of(name: str, source_end: str) -> str:
    """The reasoning of the record of ``name`` whose source ends with ``source_end``."""
    record = next(r for r in load(name) if r["source"].endswith(source_end))
    start, end, _ = split_stream(record["text"])
    return str(record["text"][start:end])


def test_a_real_restated_conclusion_fires() -> None:
    """QwQ-32B writing "Therefore, the answer is B." dozens of times among new sentences
    (an added ambiguous trace, 54k characters) draws a restatement verdict on the 8th copy."""
    text = _reasoning_of("added-ambiguous", "output_queries_QwQ-32b.json#75")
    verdict = feed_text(text, config=DetectorConfig(recurrence_enabled=False))
    assert verdict is not None
    assert verdict.detector == "restatement"
    assert verdict.evidence.count == 8
    assert verdict.evidence.excerpt == "Therefore, the answer is B."


@given(st.text(alphabet="ab Z1.-_\t", max_size=60))
def test_the_word_patterns_count_like_the_words_themselves(line: str) -> None:
    """The early-stopping patterns say a line holds 3 (or 5) words exactly when it holds
    that many runs of two letters or more."""
    words = len(re.findall(r"[A-Za-z]{2,}", line))
    assert bool(_ASCII_WORDS.match(line)) == (words >= MIN_WORDS)
    assert bool(_ASCII_WORDS_WITH_DIGITS.match(line)) == (words >= MIN_WORDS_WITH_DIGITS)


def test_a_cjk_line_is_read_without_a_list_of_its_words() -> None:
    """Reading 300-character CJK lines takes under 4 KiB of heap for the while: their words
    are counted as far as needed, not listed (a string per character took 5 KiB more)."""
    line = ("所以我们需要再检查一下这个答案是否正确" * 16)[:300] + "\n"
    analyzer = RestatementAnalyzer()
    blocks = Blocker().push(line * 12) or []
    for block in blocks[:3]:  # the table and the ring are allocated here
        analyzer.analyze(block)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for block in blocks[3:]:
        analyzer.analyze(block)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    assert peak < 4 * 1024, peak
