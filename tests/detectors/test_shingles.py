"""The shingle table: counts of the recent k-grams, whatever the batches they come in."""

from __future__ import annotations

import itertools
import random

import pytest

from detectors.blocks import Blocker
from detectors.shingles import TOP, ShingleTable


def _see(keys: list[str], cuts: list[int], k: int = 3, history: int = 256) -> list[int]:
    """What a fresh table returns for ``keys`` fed in batches cut at ``cuts``, joined."""
    table = ShingleTable(k, history)
    out: list[int] = []
    bounds = [0, *sorted(cuts), len(keys)]
    for a, b in itertools.pairwise(bounds):
        table.reserve(b - a)
        out.extend(table.see(keys[a:b]))
    return out


def _each(keys: list[str], k: int = 2, history: int = 256) -> list[int]:
    """The count of the shingle ending at each key, fed one at a time (0: new)."""
    table = ShingleTable(k, history)
    out = []
    for key in keys:
        table.reserve(1)
        out.append(sum(table.see([key])))
    return out


def test_the_first_keys_end_no_shingle() -> None:
    """A stream's first ``k - 1`` keys end no shingle; every key after them ends one (the
    ring holds one entry a shingle)."""
    table = ShingleTable(4, 256)
    table.reserve(10)
    table.see(["a", "b"])
    assert table._rpos == 0
    table.see(["c", "d", "e"])
    assert table._rpos == 2


def test_a_shingle_counts_its_earlier_sightings_up_to_the_top() -> None:
    """A shingle written again reports how many times it was seen before, and the count
    stops at ``TOP`` (3); a new shingle is left out of what ``see`` returns."""
    counts = _each(["x", "y"] * 40)
    assert counts[:8] == [0, 0, 0, 1, 1, 2, 2, 3]
    assert counts[2 * TOP + 1] == TOP
    assert max(counts) == TOP
    assert _see(["x", "y"] * 40, [], k=2) == [c for c in counts if c]


def test_batches_do_not_change_the_counts() -> None:
    """The same keys give the same counts in one batch, one key a batch, or cut at random
    points: the rolling hash and the table carry over from batch to batch."""
    words = ["we", "try", "the", "jug", "again", "and", "pour", "into", "other"]
    rng = random.Random(7)
    keys = [rng.choice(words) for _ in range(3000)]
    whole = _see(keys, [])
    assert len(whole) > 100  # many shingles come back
    assert _see(keys, list(range(1, len(keys)))) == whole
    for seed in range(3):
        cuts = random.Random(seed).sample(range(1, len(keys)), 40)
        assert _see(keys, cuts) == whole


@pytest.mark.parametrize(
    "keys",
    [
        ["ΟΔΟΣ", "Σ", "ΑΣ", "\u03c3", "\u03c2", "Σ"] * 8,  # a final sigma stays final, key by key
        ["İstanbul", "Straße", "STRASSE", "ǅ", "ǆ"] * 8,  # lowering that changes lengths
        ["A", "a", "Word", "WORD", "word", "日本", "🌰"] * 8,
    ],
)
def test_keys_are_compared_lowered_one_by_one(keys: list[str]) -> None:
    """A batch of keys is lowered as one text, and counts exactly as if each key had been
    lowered on its own (no key's context reaches its neighbours)."""
    lowered = [key.lower() for key in keys]
    assert _see(keys, []) == _see(lowered, list(range(1, len(keys))))


def test_the_blockers_tokens_never_hold_the_batch_separator() -> None:
    """The keys come from the blocker's tokens, which never hold a carriage return (the
    character that joins a batch): text full of them splits around them."""
    text = "line one\r\nline\rtwo\r\r three \u3000 四\r" * 40
    for block in Blocker().push(text) or []:
        assert not any("\r" in tok for tok in block.toks)


def test_a_full_ring_forgets_the_oldest_shingle() -> None:
    """Past ``history`` shingles, the oldest is forgotten: a shingle seen once, then
    ``history`` fresh ones, is new again."""
    history = 256
    fresh = [f"w{i}" for i in range(history + 10)]
    assert _each(["p", "q", *fresh[:history], "p", "q"], history=history)[-1] == 0
    assert _each(["p", "q", *fresh[: history - 10], "p", "q"], history=history)[-1] == 1


def test_a_shingle_goes_where_the_64_bit_rolling_hash_puts_it() -> None:
    """The batch hashing (numpy, wrapping at 2**64) places every shingle where the rolling
    hash of the module docstring does, computed key by key with Python ints: the same
    slots and fingerprints, so the same collisions and verdicts as before it."""
    from zlib import crc32

    from detectors import shinglecount as shingles

    k, history = 8, 8192
    rng = random.Random(5)
    keys = [f"W{rng.randrange(40)}" for _ in range(300)]
    table = ShingleTable(k, history)
    for a in range(0, len(keys), 37):
        table.reserve(37)
        table.see(keys[a:a + 37])
    maxbits = (2 * history).bit_length() - 1
    bits = table._bits  # the table as large as it is now (a slot is its top bits)
    power = pow(shingles.BASE, k, 1 << 64)
    rolling, window = 0, [0] * k
    for i, key in enumerate(keys):
        h = crc32(key.lower().encode())
        rolling = (rolling * shingles.BASE + h - window[0] * power) % (1 << 64)
        window = [*window[1:], h]
        if i < k - 1:
            continue
        mixed = rolling * shingles.MIX % (1 << 64)
        slot, fp = mixed >> (64 - bits), (mixed >> (58 - maxbits)) & 0x3F
        assert table._table[slot] >> 2 == fp or table._table[slot ^ 1] >> 2 == fp, i


def test_fresh_shingles_are_rarely_taken_for_copies() -> None:
    """A shingle never written before is *seen* only when its pair holds another shingle
    with its six-bit fingerprint: with the ring full of distinct shingles (the table at
    most half full), at most one in 64 new shingles, as the module docstring says."""
    history = 8192
    table = ShingleTable(2, history)
    keys = [f"k{i}" for i in range(4 * history)]
    false = 0
    for a in range(0, len(keys), 64):
        table.reserve(64)
        counts = table.see(keys[a:a + 64])
        if a >= 2 * history:  # the ring has wrapped: the table holds ``history`` shingles
            false += len(counts)
    assert 0 < false < 2 * history / 64, false
