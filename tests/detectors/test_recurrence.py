"""The recurrence detector's accumulated evidence and its fingerprinted shingle table."""

from __future__ import annotations

import random
import tracemalloc

import pytest
from detector_helpers import feed_pieces, feed_text, key, load
from enumeration import inline, listed, prose, schedules

from detectors import Channel, DetectorConfig, Verdict
from detectors.blocks import Block, Blocker
from detectors.chain import Chain, default_chain, text_analyzers
from detectors.recurrence import RecurrenceAnalyzer
from detectors.replay import split_stream
from detectors.shingles import TOP
from detectors.tokenize import split_deltas


def _reasoning(index: int) -> str:
    record = load("healthy")[index]
    start, end, _ = split_stream(record["text"])
    return str(record["text"][start:end])


def _scores(text: str, config: DetectorConfig) -> list[float]:
    """The accumulated evidence after each block of ``text`` (thresholds out of reach)."""
    analyzer = RecurrenceAnalyzer(
        config.recurrence_shingle,
        config.recurrence_history,
        config.recurrence_min_seen,
        config.recurrence_window_blocks,
        2.0,
        config.recurrence_drift,
        float("inf"),
    )
    scores = []
    for block in Blocker().push(text) or []:
        assert analyzer.analyze(block) is None
        scores.append(analyzer.evidence)
    return scores


def test_fresh_text_builds_no_evidence() -> None:
    """Text that never repeats a shingle (17k tokens, past the history) scores 0 throughout:
    fingerprints keep table collisions from faking recurrence."""
    text = " ".join(f"w{i}x{i * 7919 % 10007}" for i in range(17000))
    assert max(_scores(text, DetectorConfig())) == 0.0


def test_healthy_reasoning_stays_below_half_the_threshold() -> None:
    """A long real healthy trace never gets near the evidence threshold."""
    config = DetectorConfig()
    assert max(_scores(_reasoning(32), config)) < config.recurrence_evidence / 2


def test_accumulation_fires_before_the_window_rule() -> None:
    """A paragraph loop after real reasoning fires on accumulated evidence during its second
    or third copy, well before a window full of third copies."""
    head = _reasoning(14)[:6000]
    paragraph = _reasoning(15)[3000:4200]
    verdict = feed_text(head + paragraph * 6)
    assert verdict is not None
    assert verdict.detector == "recurrence"
    assert "accumulating" in verdict.reason
    assert verdict.at_char < len(head) + 2 * len(paragraph) + 512
    # Without the accumulation rule only the window of third copies fires, later.
    late = feed_text(head + paragraph * 6, config=DetectorConfig(recurrence_evidence=1e9))
    assert late is not None
    assert late.at_char > verdict.at_char


def test_evidence_drains_after_a_burst() -> None:
    """A copied burst raises the evidence, fresh text brings it back to 0."""
    text = _reasoning(19)
    burst = text[:6000] + text[1000:1700] + text[6000:16000]
    scores = _scores(burst, DetectorConfig())
    assert max(scores) > 0.5
    assert scores[-1] == 0.0


def test_interleaved_copies_accumulate() -> None:
    """Copies of a few paragraphs in a shifting order with fresh sentences between them keep
    adding evidence: the order and the gaps do not reset it (the sentences detector, off
    here, counts them too)."""
    source = _reasoning(16)
    paras = [source[i : i + 500] for i in (2000, 3000, 4000)]
    fresh = [source[i : i + 120] for i in range(8000, 16000, 400)]
    order = [0, 1, 0, 2, 1, 0, 2, 2, 1, 0, 1, 2]
    text = source[:2000] + "".join(paras[j] + fresh[n] for n, j in enumerate(order))
    verdict = feed_text(text, config=DetectorConfig(sentences_enabled=False))
    assert verdict is not None
    assert verdict.detector == "recurrence"


def test_each_text_detector_stays_under_64_kib() -> None:
    """Each text analyzer's peak memory over a 180k-character stream is at most 64 KiB."""
    text = "".join(_reasoning(i) for i in (19, 26, 31, 32, 14, 15, 16))[:180_000]
    blocks = Blocker().push(text) or []
    assert len(blocks) > 600
    for name, make in text_analyzers(DetectorConfig()):
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        analyzer = make()
        for block in blocks:
            analyzer.analyze(block)
        peak = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
        assert peak <= 64 * 1024, (name, peak)


def test_chain_allocates_recurrence_tables_only_once_text_arrives() -> None:
    """A stream idle before its first 256-character block holds no recurrence tables; the
    first block allocates the smallest (4,096 slots: 4 KiB), not the full 16 KiB."""
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    chain = default_chain(DetectorConfig())
    for _ in range(24):
        assert chain.feed("thinking", " word", 1, 0.0) is None
    young = tracemalloc.get_traced_memory()[0] - base
    for _ in range(60):
        assert chain.feed("thinking", " more", 1, 0.0) is None
    grown = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert young < 16 * 1024, young
    assert 4 * 1024 <= grown - young < 6 * 1024, (young, grown)


def test_chains_of_one_config_share_factories_not_state() -> None:
    """The analyzer factories are made once per config (a stream does not carry closures
    of its own), and each chain still builds analyzers of its own: a second chain fed the
    same loop fires at the same character as the first, not earlier."""
    assert text_analyzers(DetectorConfig()) is text_analyzers(DetectorConfig())
    source = _reasoning(16)
    text = source[:2000] + source[3000:3600] * 6
    first = feed_text(text)
    second = feed_text(text)
    assert first is not None
    assert first.detector == "periodic"  # a 600-character unit, at its second copy's end
    assert second is not None
    assert (second.detector, second.at_char) == (first.detector, first.at_char)


def _distinct_blocks(words: int) -> list[Block]:
    """Blocks of ``words`` words that never repeat: about one shingle per word."""
    text = " ".join(f"w{i}x{i * 7919 % 10007}" for i in range(words))
    return Blocker().push(text) or []


def _fed(words: int, history: int) -> tuple[RecurrenceAnalyzer, int]:
    """An analyzer fed ``words`` distinct words, and the bytes it holds (tracemalloc)."""
    blocks = _distinct_blocks(words)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    analyzer = RecurrenceAnalyzer(2, history, 2, 12, 2.0, 0.45, float("inf"))
    for block in blocks:
        assert analyzer.analyze(block) is None
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return analyzer, held


def _held(words: int, history: int) -> int:
    """Bytes an analyzer holds after ``words`` distinct words (tracemalloc)."""
    return _fed(words, history)[1]


def test_table_and_ring_grow_with_the_text() -> None:
    """The table holds eight one-byte slots per shingle, rounded up to a power of
    two, until it reaches its full ``2 * history`` slots past ``history / 8`` shingles;
    the ring costs 2-4 bytes per shingle (a power of two of entries) until it holds
    ``history`` of them, then wraps. A short stream does not pay for the whole history up
    front, a long one does not grow past it."""
    history = DetectorConfig().recurrence_history
    full = 2 * history  # one byte a slot: a six-bit fingerprint over a two-bit counter
    fixed = 4 * 1024  # the analyzer itself, its window and its spare room, at most
    # 300 shingles: a 4,096-slot table (4 KiB) and the ring, not 16 KiB.
    assert 4 * 1024 <= _held(300, history) < 4 * 1024 + 3 * 300 + fixed
    # Past history / 8 shingles the table is full-size; the ring holds a power of two of
    # entries, 2 bytes each (allocated whole, not grown by appends).
    analyzer, held = _fed(1_200, history)
    assert (len(analyzer._table._ring), analyzer._table._ring.itemsize) == (2_048, 2)
    assert full <= held < full + 2 * 2_048 + fixed
    # Past the history the ring is full (2 * history bytes) and stops growing: its table and
    # ring have the same sizes after three times the history as just past it (what is
    # deterministic), and both hold the same bounded bytes. The bytes themselves are not
    # compared with each other: allocator noise moved them by 1,092 bytes once (issue 29).
    for words in (history + 500, 3 * history):
        analyzer, held = _fed(words, history)
        assert len(analyzer._table._table) == 2 * history
        assert (len(analyzer._table._ring), analyzer._table._ring.itemsize) == (history, 2)
        assert full + 2 * history <= held < full + 2 * history + fixed


def test_saturated_counters_expire_without_touching_their_pair() -> None:
    """Counters stop at 3, and a sighting past that is not counted (its ring entry says
    so). A phrase looped far past that, then forgotten, leaves no count behind, and its
    pair neighbours keep theirs: once the ring holds only fresh shingles, the counters add
    up to exactly the ring's counted entries (nothing left over, nothing taken from a
    neighbour), and each counted entry's slot has a count."""
    history = 256
    analyzer = RecurrenceAnalyzer(2, history, 2, 1, 2.0, 0.45, float("inf"))
    blocker = Blocker()
    loop = "the same two words again and again " * 200
    fresh = " ".join(f"w{i}x{i * 7919 % 10007}" for i in range(3 * history))
    for block in blocker.push(loop + fresh) or []:
        assert analyzer.analyze(block) is None
    table = analyzer._table._table
    counts = [b & 3 for b in table]
    kept = [slot for slot in analyzer._table._ring if slot != 0xFFFF]
    assert max(counts) < TOP  # fresh text: the loop's counters are gone
    assert sum(counts) == len(kept)
    for slot in kept:
        assert table[slot] & 3 >= 1


def test_a_counter_holds_its_counted_sightings_while_a_loop_goes_on() -> None:
    """In a short loop that runs past the ring, each counter equals the ring entries that
    point at it (the sightings past the top are not counted, so expiry takes only what was
    added), and a looped shingle keeps reporting at least ``min_seen`` (2) sightings."""
    history = 256
    analyzer = RecurrenceAnalyzer(2, history, 2, 1, 2.0, 0.45, float("inf"))
    blocker = Blocker()
    for block in blocker.push("one two three four five six seven " * 400) or []:
        analyzer.analyze(block)
    ring = analyzer._table._ring
    table = analyzer._table._table
    for slot in set(ring) - {0xFFFF}:
        assert table[slot] & 3 == sum(1 for entry in ring if entry == slot)
    assert analyzer.window_score == 1.0


def test_a_looped_shingle_counts_up_to_the_top() -> None:
    """The evidence of a verbatim loop reports at most ``TOP + 1`` sightings: the counter
    stops at ``TOP`` and the loop is not lost because of it."""
    loop = "Let me check the seventh jug once more before moving on. " * 60
    alone = DetectorConfig(**{f"{name}_enabled": False for name in
                              ("periodic", "restatement", "sentences", "degeneration")})
    verdict = feed_text(loop, config=alone)
    assert verdict is not None
    assert verdict.detector == "recurrence"
    assert 2 <= verdict.evidence.count <= TOP + 1


@pytest.mark.parametrize("key", ["recurrence_min_seen", "recurrence_code_min_seen"])
@pytest.mark.parametrize("seen", [0, TOP + 1])
def test_a_count_the_counters_cannot_hold_is_refused(key: str, seen: int) -> None:
    """A threshold of sightings outside 1..TOP is a configuration error, not a detector
    that silently never counts: building the chain names the key."""
    with pytest.raises(ValueError, match=key):
        default_chain(DetectorConfig(**{key: seen}))


def test_counts_survive_the_table_growing() -> None:
    """A paragraph seen once is *seen* when it comes back after the table has doubled four
    times, and seen twice (``min_seen``) on its third copy: growing re-inserts every
    shingle with its count and fingerprint."""
    words = [f"p{i}q{i * 104729 % 9973}" for i in range(2_000)]
    paragraph = " ".join(words[:150])
    fresh1 = " ".join(words[150:1_100])
    fresh2 = " ".join(words[1_100:])
    history = DetectorConfig().recurrence_history
    # Window of one block: ``window_score`` is the share of the block's shingles seen
    # ``min_seen`` times before; the thresholds are out of reach.
    analyzer = RecurrenceAnalyzer(2, history, 2, 1, 2.0, 0.45, float("inf"))
    blocker = Blocker()

    def shares(text: str) -> list[float]:
        out = []
        for block in blocker.push(text + " ") or []:
            assert analyzer.analyze(block) is None
            out.append(analyzer.window_score)
        return out

    first = shares(paragraph)
    shares(fresh1)
    second = shares(paragraph)
    shares(fresh2)
    third = shares(paragraph)
    assert max(first) == 0.0
    assert max(second) < 0.1, second
    assert min(third[1:-1]) > 0.9, third


def test_ring_growth_keeps_the_scores() -> None:
    """A text that repeats a paragraph across the ring's wrap (a small history) scores the
    same blocks as copies as before and after the wrap: expiry forgets the oldest shingles."""
    source = _reasoning(16)
    paragraph = source[3000:3600]
    config = DetectorConfig(recurrence_history=256)
    fresh = _scores(source[:6000], config)
    assert max(fresh) < 1.0
    # Within the history a copy is seen; after 256 fresh shingles it is forgotten.
    near = _scores(paragraph + paragraph, config)
    far = _scores(paragraph + source[6000:9000] + paragraph, config)
    assert max(near) > 0.5
    assert max(far) < 0.5


def _feed(chain: Chain, channel: Channel, text: str) -> Verdict | None:
    for piece in split_deltas(text):
        verdict = chain.feed(channel, piece, 1, 0.0)
        if verdict is not None:
            return verdict
    return None


def test_a_chain_deep_in_its_reasoning_holds_under_38_kib() -> None:
    """9,000 characters (about 2,000 tokens) into healthy reasoning, the whole chain holds
    its full-size recurrence table (16 KiB), the ring (4,096 entries, 8 KiB: a power of
    two), the periodic window and the rest in under 38 KiB (32.2 KiB when written). It held
    51 KiB with one-byte counters and an 8,192-character tail, 40.4 KiB with a ring grown
    by appends (which cost more RSS than that, in the holes its reallocations left), and
    about 40 KiB with four-bit counters and eight-bit fingerprints."""
    thinking = "".join(_reasoning(i) for i in (32, 31, 30, 19))[:9000]
    assert len(thinking) == 9000
    pieces = split_deltas(thinking)
    # A chain fed first fills the process's one-time caches (compiled patterns, interned
    # strings), which would otherwise count here when the test runs alone.
    warm = default_chain(DetectorConfig())
    for piece in pieces:
        warm.feed("thinking", piece, 1, 0.0)
    del warm
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    chain = default_chain(DetectorConfig())
    for piece in pieces:
        assert chain.feed("thinking", piece, 1, 0.0) is None
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert 24 * 1024 <= held < 38 * 1024, held


def test_a_chain_stops_growing_once_its_ring_is_full() -> None:
    """Past the history (8,192 shingles) a channel's state is flat: the table and the ring
    are full-size and wrap. After about 22,000 tokens of text that never repeats, the
    chain holds 32 to 40 KiB (table 16, ring 16, the rest: 37.7 when written; 45 with
    four-bit counters and eight-bit fingerprints), and 22,000 tokens more add under 1 KiB
    (32 bytes when written)."""
    words = [f"w{i}x{i * 7919 % 10007}" for i in range(40_000)]
    text = "".join(" ".join(words[i : i + 10]) + ". " for i in range(0, len(words), 10))
    pieces = split_deltas(text)
    half = len(pieces) // 2
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    chain = default_chain(DetectorConfig())
    for piece in pieces[:half]:
        assert chain.feed("thinking", piece, 1, 0.0) is None
    mid = tracemalloc.get_traced_memory()[0] - base
    for piece in pieces[half:]:
        assert chain.feed("thinking", piece, 1, 0.0) is None
    end = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert half > 20_000
    assert 32 * 1024 <= mid < 40 * 1024, mid
    assert abs(end - mid) < 1024, (mid, end)


def test_chain_releases_thinking_state_once_the_answer_begins() -> None:
    """The answer's first 256-character block releases the thinking channel's tables, so a
    stream in its answer holds one channel's tables, not two."""
    thinking = _reasoning(32)[:4000]
    answer = _reasoning(31)[:600]
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    chain = default_chain(DetectorConfig())
    assert _feed(chain, "thinking", thinking) is None
    thought = tracemalloc.get_traced_memory()[0] - base
    assert _feed(chain, "content", answer) is None
    answering = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert thought >= 16 * 1024, thought
    # The content channel's own tables replace the thinking ones: no second set.
    assert answering < thought, (thought, answering)


def test_short_content_before_thinking_keeps_the_thinking_state() -> None:
    """A line break of content before ``<think>`` is not an answer: a loop whose copies
    straddle it fires exactly where it fires without it."""
    paragraph = _reasoning(31)[:700]
    loop = paragraph * 5
    plain = default_chain(DetectorConfig())
    expected = _feed(plain, "thinking", loop)
    assert expected is not None
    split = default_chain(DetectorConfig())
    assert _feed(split, "thinking", paragraph) is None
    assert _feed(split, "content", "\n\n") is None
    got = _feed(split, "thinking", loop[len(paragraph):])
    assert got is not None
    assert (got.detector, got.channel, got.at_char - 2) == (
        expected.detector, expected.channel, expected.at_char)


def test_thinking_after_the_answer_starts_fresh_and_is_still_watched() -> None:
    """Thinking that comes back after the answer began is watched from fresh state: a
    loop there still fires."""
    chain = default_chain(DetectorConfig())
    assert _feed(chain, "thinking", _reasoning(32)[:3000]) is None
    assert _feed(chain, "content", _reasoning(31)[:600]) is None
    verdict = _feed(chain, "thinking", _reasoning(30)[:700] * 6)
    assert verdict is not None
    assert verdict.channel == "thinking"


def test_a_channel_without_text_detectors_keeps_no_text() -> None:
    """With ``content_enabled = false`` the content channel is only counted: no blocks are
    cut, no tail is kept, whatever the answer's length."""
    chain = default_chain(DetectorConfig(content_enabled=False))
    assert _feed(chain, "thinking", _reasoning(32)[:300]) is None
    answer = _reasoning(31)[:20000]
    pieces = split_deltas(answer)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for piece in pieces:
        assert chain.feed("content", piece, 1, 0.0) is None
    grown = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    # The channel's counters and an empty blocker, not the answer's last 8 KiB.
    assert grown < 2048, grown
    assert chain.chars == 300 + len(answer)


def _shuffled(seed: int) -> list[list[tuple[str, int]]]:
    """The candidate schedules in a seeded random order (a search that jumps around)."""
    order = list(schedules())
    random.Random(seed).shuffle(order)
    return order


@pytest.mark.parametrize("seed", [None, 0, 1, 2])
def test_enumerated_candidates_never_add_up(seed: int | None) -> None:
    """A puzzle search that writes candidate schedules whose steps share most shingles but
    differ in people and numbers (inline, as one paragraph each, or as numbered lines)
    draws no verdict from the whole chain over 60,000 characters, in file order or not."""
    order = None if seed is None else _shuffled(seed)
    for text in (inline(60_000, order), listed(60_000, order)):
        config = DetectorConfig()
        assert max(_scores(text, config)) < config.recurrence_evidence / 2
        assert feed_text(text) is None


def test_the_same_candidate_written_again_and_again_fires() -> None:
    """A search stuck on one schedule, writing the same list with the same numbers among
    varied sentences, is a loop: its lists count and recurrence fires."""
    moves = next(iter(schedules()))
    text = "".join(
        f"Let me try again, attempt {i} of this.\n" + listed(1, [moves]).split("\n", 1)[1]
        for i in range(30)
    )
    verdict = feed_text(text, config=DetectorConfig(restatement_enabled=False))
    assert verdict is not None
    assert verdict.detector == "recurrence"
    assert verdict.at_char < len(text) // 3


def test_prose_in_list_form_counts_as_prose() -> None:
    """Numbered reasoning steps with few numbers (prose in list form) repeated verbatim count
    as they are written, not only at the end of the list: a loop of them fires recurrence
    (with periodic's copy rule off, which catches this verbatim loop first)."""
    steps = "".join(
        f"{i}. {sentence}\n" for i, sentence in enumerate(
            [
                "Light the first rope from both ends and the second rope from one end.",
                "When the first rope is gone, light the other end of the second rope.",
                "The second rope then burns out after a quarter of an hour more.",
                "So the total time measured is three quarters of an hour in all.",
            ],
            1,
        )
    )
    verdict = feed_text(_reasoning(14)[:3000] + ("Wait, maybe:\n" + steps) * 8,
                        config=DetectorConfig(periodic_copy_chars=0))
    assert verdict is not None
    assert verdict.detector == "recurrence"


@pytest.mark.parametrize("size", [1, 7, 256, 4096])
def test_list_rule_does_not_depend_on_chunking(size: int) -> None:
    """Held copies, released or dropped, give the same verdict whatever the deltas."""
    moves = next(iter(schedules()))
    text = inline(20_000) + "".join(
        f"Again, attempt {i}.\n" + listed(1, [moves]).split("\n", 1)[1] for i in range(30)
    )
    whole = key(feed_text(text))
    assert whole is not None
    pieces = [text[i : i + size] for i in range(0, len(text), size)]
    assert key(feed_pieces(pieces)) == whole


def test_a_real_search_stuck_on_the_same_schedules_still_fires() -> None:
    """DeepHermes-3 writing the same bridge schedules again and again, with the same
    numbers, until it gives up (an added ambiguous trace) still draws a recurrence verdict:
    its lists repeat their numbers, so they count."""
    record = next(
        r for r in load("added-ambiguous") if r["source"].endswith("dh3-prev.json#66")
    )
    start, end, _ = split_stream(record["text"])
    verdict = feed_text(record["text"][start:end])
    assert verdict is not None
    assert verdict.detector == "recurrence"


def test_a_short_unit_loop_fires_on_the_window_by_its_sixth_copy() -> None:
    """A 200-character unit repeated verbatim after real reasoning fills the 3-block window
    with third copies and fires before its sixth copy ends (seventh with the old 4-block,
    76% window); the healthy traces reach 69% over 3 blocks, the threshold is 90%. (The
    chain's periodic copy rule, off here, fires earlier: after the fourth copy.)"""
    head = _reasoning(14)[:6000] + "\n\n"
    unit = _reasoning(15)[3000:3200] + "\n\n"
    verdict = feed_text(head + unit * 12, config=DetectorConfig(periodic_copy_chars=0))
    assert verdict is not None
    assert verdict.detector == "recurrence"
    assert "of the last" in verdict.reason
    assert verdict.at_char - len(head) < 6 * len(unit)


def _jug_attempt(n: int) -> str:
    """A numbered attempt: three prose steps written the same way every time, then two
    items of figures that change from one attempt to the next. The list as a whole is
    made of numbers (more than half as many as its words) and they are new each time."""
    a, b = (n * 7) % 13 + 1, (n * 5) % 11 + 1
    figures = [a, b, a + b, n, 2 * n, b + 7, a + 1, b + 1, 2 * a, 2 * b, n + 3, a + n,
               b + n, a * b, n * n, a + 2]
    return (
        f"Attempt {n}, let me write the steps again:\n"
        "1. Fill the small jug from the tap and pour all of it into the large jug.\n"
        "2. Fill the small jug once more and pour until the large jug is completely full.\n"
        "3. Empty the large jug and pour what is left in the small jug into the large one.\n"
        f"4. Levels {' '.join(map(str, figures))}.\n"
        f"5. Totals {' '.join(str(f + n) for f in figures)}.\n"
    )


def test_prose_items_count_in_a_list_whose_numbers_change() -> None:
    """Prose items written again verbatim count at the end of each item, even inside lists
    whose numbers are new every time (whose number items add nothing): the rumination
    fires recurrence within 20 attempts. Dropped whole with their lists, as they were
    before, they never fire."""
    text = _reasoning(14)[:3000] + "".join(_jug_attempt(n) for n in range(1, 40))
    config = DetectorConfig(periodic_copy_chars=0, restatement_enabled=False,
                            sentences_enabled=False)
    verdict = feed_text(text, config=config)
    assert verdict is not None
    assert verdict.detector == "recurrence"
    assert verdict.at_char < 3000 + 20 * len(_jug_attempt(10))


def test_number_items_alone_still_add_nothing() -> None:
    """The same attempts with only their number items (new numbers each time) stay quiet:
    the per-item rule releases prose items only."""
    lines = [
        "".join(line + "\n" for line in _jug_attempt(n).splitlines()
                if line[:2] not in {"1.", "2.", "3."})
        for n in range(1, 60)
    ]
    config = DetectorConfig()
    assert max(_scores("".join(lines), config)) < config.recurrence_evidence / 2
    assert feed_text(_reasoning(14)[:3000] + "".join(lines)) is None


@pytest.mark.parametrize("lines", [True, False])
@pytest.mark.parametrize("seed", [None, 0, 1])
def test_candidates_written_as_prose_never_add_up(lines: bool, seed: int | None) -> None:
    """The bridge-and-torch false alarm of GLM-Z1 (issue 38): candidate schedules written as
    prose, one step a line ("A and B cross, 3 minutes.") or one sentence each, share their
    steps while their totals differ. A line that starts with a one-letter name is a step of
    a list, as a numbered one is, and a sentence that does makes its line a list, as an
    enumerator does: their copies never add up over 60,000 characters."""
    order = None if seed is None else _shuffled(seed)
    text = prose(60_000, order, lines=lines)
    config = DetectorConfig()
    assert max(_scores(text, config)) < config.recurrence_evidence / 2
    only = DetectorConfig(sentences_enabled=False, restatement_enabled=False)
    assert feed_text(text, config=only) is None


@pytest.mark.parametrize("lines", [True, False])
def test_the_same_candidate_in_prose_again_and_again_fires(lines: bool) -> None:
    """A search stuck on one schedule, writing its steps as prose with the same numbers
    among varied sentences, comes back whole: its copies count and recurrence fires."""
    moves = next(iter(schedules()))
    text = "".join(
        f"Let me try again, attempt {i} of this.\n"
        + prose(1, [moves], lines=lines).split("\n\n", 1)[1]
        for i in range(30)
    )
    only = DetectorConfig(sentences_enabled=False, restatement_enabled=False)
    verdict = feed_text(text, config=only)
    assert verdict is not None
    assert verdict.detector == "recurrence"
    assert verdict.at_char < len(text) // 3


def test_sentences_that_start_with_an_article_still_count() -> None:
    """"A" is also an article: a sentence or a line that starts with it and goes on in
    words is prose, and a loop of them fires as before (their line counts at its end)."""
    unit = (
        "A better way is to light the first rope from both ends and the second from one. "
        "A quarter of an hour is left on the second rope when the first one burns out.\n"
        "A simpler check: the second rope then burns from both ends for fifteen minutes.\n"
    )
    text = _reasoning(14)[:3000] + "".join(
        f"Let me think about it once more, take {i}.\n" + unit for i in range(20)
    )
    only = DetectorConfig(sentences_enabled=False, restatement_enabled=False,
                          periodic_copy_chars=0)
    verdict = feed_text(text, config=only)
    assert verdict is not None
    assert verdict.detector == "recurrence"
