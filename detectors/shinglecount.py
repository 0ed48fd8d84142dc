"""Count one batch of shingles into a :class:`~detectors.shingles.ShingleTable`'s table
and ring: the recurrence detector's per-key loop, in Python here and in C beside it.

:func:`count` is the whole per-batch work of ``ShingleTable.see``: hash the keys, roll
the shingle hashes, find each shingle's slot and fingerprint, raise or take its counter,
and write the ring (forgetting the oldest shingle once it wraps). The table and the ring
are changed in place; the function holds no state of its own.

Two implementations, one contract: this module, and ``shinglecount.c``, which ``setup.py``
compiles with the mypyc modules into an extension that Python imports first. Each
returns the same counts and leaves the same bytes in the table and the ring, and the same
hashes in ``last``, for every input (``tests/detectors/test_shinglecount.py`` compares
them; ``tests/test_build.py`` compares the verdicts of the two builds on every trace).
With the C one, ``ShingleTable.see`` takes 3.8 µs a batch of a healthy stream, against
14.9 with this one compiled by mypyc: four numpy calls a batch, and an item access of the
generic kind per table byte, which mypyc cannot compile to a byte load.

The hash: a key's is the CRC-32 of its lowered UTF-8 bytes, and a shingle's is
``sum(h[i - t] * BASE**t for t < k) * MIX`` modulo 2**64 over its ``k`` keys (numpy's
``uint64`` wraps as that modulo does). Its top ``maxbits + 6`` bits are a *full* slot:
the slot in the full-size table over a six-bit fingerprint.
"""

from __future__ import annotations

from array import array
from typing import Final
from zlib import crc32

import numpy as np
import numpy.typing as npt

#: The rolling hash's base and the multiplier that mixes it (see the module docstring).
BASE: Final = 0x100000001B3
MIX: Final = 0x9E3779B97F4A7C15
#: Ring entry of a shingle that was not counted (the table had no room for it, or its
#: counter was at :data:`TOP`): nothing to forget when it expires.
DROPPED: Final = 0xFFFF
#: The same, while the table grows (the ring's entries are wider then).
GONE: Final = 0xFFFFFFFF
#: A fingerprint's width in bits; a slot's byte is ``fingerprint << 2 | counter``.
FP_BITS: Final = 6
FP_MASK: Final = (1 << FP_BITS) - 1
#: A counter's largest value (two bits).
TOP: Final = 3
#: Joins a batch of keys so that one ``lower``, ``encode`` and ``split`` serve them all.
#: No key holds it (the blocker's tokens hold no carriage return), and it is neither cased
#: nor case-ignorable, so the joined text lowers exactly as each key on its own would (a
#: final sigma stays final).
SEP: Final = "\r"
_SEP_BYTES: Final = b"\r"


def place(table: bytearray, slot: int, want: int) -> tuple[int, int]:
    """Count a sighting of the shingle whose home is ``slot`` and whose byte with a zero
    counter is ``want``: return where it went and how many times it was seen before (0 for
    a new one). It is seen in the pair's slot that holds its fingerprint with a counter;
    a new one takes its home if free, else the pair's other slot if free; else it is not
    counted (a full pair) and the slot is :data:`DROPPED`, as is one whose counter was at
    :data:`TOP`. A free slot's byte is 0 (expiry clears it)."""
    b = table[slot]
    if not 0 < b - want <= TOP:
        alt = slot ^ 1
        b2 = table[alt]
        if 0 < b2 - want <= TOP:
            slot, b = alt, b2
        elif not b:
            table[slot] = want + 1
            return slot, 0
        elif not b2:
            table[alt] = want + 1
            return alt, 0
        else:
            return DROPPED, 0
    c = b - want
    if c == TOP:
        return DROPPED, c
    table[slot] = b + 1
    return slot, c


_WEIGHTS: dict[int, npt.NDArray[np.uint64]] = {}


def _weights(k: int) -> npt.NDArray[np.uint64]:
    """The correlation weights of a ``k``-key shingle's mixed hash: ``MIX * BASE**(k-1-t)``
    modulo 2**64 for its ``t``-th key, oldest first (made once per ``k``)."""
    found = _WEIGHTS.get(k)
    if found is None:
        found = _WEIGHTS[k] = np.array(
            [MIX * pow(BASE, k - 1 - t, 1 << 64) % (1 << 64) for t in range(k)], dtype=np.uint64
        )
    return found


def count(table: bytearray, ring: array[int], last: list[int], joined: bytes, warm: int,
          maxbits: int, bits: int, pos: int) -> tuple[bytearray, int]:
    """Count the shingles that end at the keys of ``joined`` (the batch's keys, lowered,
    UTF-8, joined by :data:`SEP`); return how many times each one seen before was seen (1
    to :data:`TOP`, in order; the new ones are left out) and the ring position after them.

    - ``last``: the hashes of the ``k - 1`` keys before the batch, oldest first (zeros
      before the stream's first), ``k`` being ``len(last) + 1``; replaced in place by
      those of the batch's last ``k - 1`` keys;
    - ``warm``: how many of the batch's first keys end no shingle (the stream's first
      ``k - 1`` keys);
    - ``maxbits``, ``bits``: the full-size table's size in bits, and the table's now;
    - the ring: while the table grows (``bits < maxbits``), one four-byte entry a shingle,
      ``full`` or :data:`GONE`, written from ``pos`` on (the ring already has room for
      them); once full-size, two-byte entries, the slot whose counter the shingle raised
      or :data:`DROPPED`, written at ``pos`` and wrapping at ``history`` (``2 **
      (maxbits - 1)``), each expiring the entry it overwrites (the ring has room up to
      ``pos`` plus the batch, or is ``history`` long).
    """
    counts = bytearray()
    hashes = [*map(crc32, joined.split(_SEP_BYTES))]
    k = len(last) + 1
    n = len(hashes)
    # ``window`` holds the ``k - 1`` keys before the batch, then the batch: one correlation
    # with the weights serves every shingle of it.
    window = last + hashes
    last[:] = window[n:]
    rolling = np.correlate(np.array(window, dtype=np.uint64), _weights(k), "valid")
    if warm > 0:
        rolling = rolling[warm:]
    fulls: list[int] = (rolling >> np.uint64(64 - maxbits - FP_BITS)).tolist()
    less = maxbits - bits
    slot_shift = FP_BITS + less  # the slot in the table as large as it is now
    wrap = (1 << (maxbits - 1)) - 1  # ``history``, a power of two
    dropped, top, fp_mask = DROPPED, TOP, FP_MASK
    append = counts.append
    # One loop per kind of ring, each with ``place`` written out after its two common
    # cases (a new shingle whose pair is free; a repeat in its home, below the top): the
    # call, and the test of the ring's kind, were a fifth of the loop's steps on text
    # with many repeats. Either loop is ``place`` and the ring update of the docstring.
    if less:  # the table still grows: the ring keeps full-size slots and fingerprints
        for full in fulls:
            slot = full >> slot_shift
            want = (full & fp_mask) << 2
            b = table[slot]
            if not b and not table[slot ^ 1]:
                table[slot] = want + 1
            elif 0 < b - want < top:
                table[slot] = b + 1
                append(b - want)
            elif b - want == top:  # at the top in its home: not counted again
                append(top)
                ring[pos] = GONE
                pos += 1
                continue
            else:
                alt = slot ^ 1
                b2 = table[alt]
                c = b2 - want
                if 0 < c < top:
                    table[alt] = b2 + 1
                    append(c)
                elif c == top:
                    append(c)
                    ring[pos] = GONE
                    pos += 1
                    continue
                elif not b:
                    table[slot] = want + 1
                elif not b2:
                    table[alt] = want + 1
                else:  # a full pair: not counted
                    ring[pos] = GONE
                    pos += 1
                    continue
            ring[pos] = full
            pos += 1
        return counts, pos
    for full in fulls:  # the ring wraps: each entry expires the one it overwrites
        slot = full >> slot_shift
        want = (full & fp_mask) << 2
        b = table[slot]
        if not b and not table[slot ^ 1]:
            table[slot] = want + 1
        elif 0 < b - want < top:
            table[slot] = b + 1
            append(b - want)
        elif b - want == top:
            append(top)
            slot = dropped
        else:
            alt = slot ^ 1
            b2 = table[alt]
            c = b2 - want
            if 0 < c < top:
                table[alt] = b2 + 1
                append(c)
                slot = alt
            elif c == top:
                append(c)
                slot = dropped
            elif not b:
                table[slot] = want + 1
            elif not b2:
                table[alt] = want + 1
                slot = alt
            else:
                slot = dropped
        o = ring[pos]
        ring[pos] = slot
        pos = (pos + 1) & wrap
        if o != dropped:  # forget the oldest counted sighting
            b = table[o] - 1
            table[o] = b if b & 3 else 0
    return counts, pos
