"""The C ``count`` of ``detectors/shinglecount.c`` does what its Python source does, byte
for byte: the same counts and ring position back, and the same table, ring and ``last``
after, whatever the batches. ``.ci/run`` checks that its install compiled, so these run
there; where nothing was compiled there is only the source, and nothing to compare."""

from __future__ import annotations

import importlib.util
import itertools
import random
from array import array
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import detectors.shinglecount as loaded
from detectors.native import compiled, describe

_SOURCE = Path(loaded.__file__ or "").parent / "shinglecount.py"


def _source_module() -> ModuleType:
    """``shinglecount.py`` itself, imported under another name beside the extension."""
    spec = importlib.util.spec_from_file_location("shinglecount_source", _SOURCE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pytestmark = pytest.mark.skipif(
    not compiled() or not str(loaded.__file__).endswith(".so"),
    reason=f"no C build of shinglecount to compare: {describe()}")

SOURCE = _source_module()


def _drive(keys: list[str], cuts: list[int], k: int, maxbits: int, bits: int) -> int:
    """Feed ``keys`` in batches cut at ``cuts`` through both implementations, from one
    state, comparing every result and buffer; the state goes on from the C one's. A table
    of ``bits`` grows no further here: below ``maxbits`` its ring is the wide one.
    Returns how many counts came back (for the caller to check the test saw copies)."""
    hist = 1 << (maxbits - 1)
    table = bytearray(1 << bits)
    ring = array("I") if bits < maxbits else array("H", [SOURCE.DROPPED]) * hist
    last = [0] * (k - 1)
    pos = 0
    seen = 0
    fed = 0
    bounds = [0, *sorted(set(cuts)), len(keys)]
    for a, b in itertools.pairwise(bounds):
        batch = keys[a:b]
        if not batch:
            continue
        warm = k - 1 - fed
        fed += len(batch)
        if bits < maxbits:
            ring.frombytes(bytes(4 * max(0, len(batch) - max(0, warm))))
        joined = SOURCE.SEP.join(batch).lower().encode()
        t2, r2, l2 = bytearray(table), array(ring.typecode, ring), list(last)
        want = SOURCE.count(t2, r2, l2, joined, warm, maxbits, bits, pos)
        got = loaded.count(table, ring, last, joined, warm, maxbits, bits, pos)
        assert got == want, (a, b)
        assert table == t2
        assert ring == r2
        assert last == l2
        pos = got[1]
        seen += len(got[0])
    return seen


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(["a", "B", "ab", "été", "Σ", "x1", "#", "the", ""]),
                min_size=0, max_size=400),
       st.lists(st.integers(0, 400), max_size=12),
       st.sampled_from([1, 2, 3, 8]),
       st.sampled_from([(9, 9), (9, 7), (12, 12), (14, 12)]))
def test_c_and_source_count_alike(keys: list[str], cuts: list[int], k: int,
                                  sizes: tuple[int, int]) -> None:
    """Random streams of a few keys (copies everywhere, counters at the top, full pairs,
    a wrapping ring), cut into random batches."""
    maxbits, bits = sizes
    _drive(keys, cuts, k, maxbits, bits)


def test_long_batches_wrapping_rings_and_crowded_tables_count_alike() -> None:
    """Batches longer than the C code's stack buffers (512 keys), a ring that wraps many
    times, and a small table crowded enough that pairs fill and fingerprints collide."""
    rng = random.Random(7)
    phrases = [[f"w{rng.randrange(300)}" for _ in range(20)] for _ in range(40)]
    keys = [key for _ in range(300) for key in rng.choice(phrases)]
    cuts = [*range(0, 6000, 700), 6000 - 3]
    assert _drive(keys, cuts, 8, 9, 9) > 500
    assert _drive(keys, cuts, 2, 10, 8) > 500


def test_the_hash_is_zlibs_crc32_of_each_lowered_key() -> None:
    """One shingle of one key (``k = 1``) lands where CRC-32 of its bytes says."""
    from zlib import crc32

    for key in ("a", "été", "", "Σς", "x" * 300):
        table = bytearray(1 << 12)
        ring = array("H", [SOURCE.DROPPED]) * (1 << 11)
        loaded.count(table, ring, [], key.encode(), 0, 12, 12, 0)
        full = (crc32(key.encode()) * SOURCE.MIX % (1 << 64)) >> (64 - 12 - SOURCE.FP_BITS)
        assert table[full >> SOURCE.FP_BITS] == ((full & SOURCE.FP_MASK) << 2) + 1, key


def test_bad_arguments_are_refused_not_written_past() -> None:
    """Wrong types, a table of the wrong size, a ring of the wrong width or without room:
    an error, and nothing written."""
    table = bytearray(1 << 9)
    wide = array("I")
    with pytest.raises(TypeError):
        loaded.count(bytes(512), wide, [0], b"a", 0, 9, 9, 0)
    with pytest.raises(TypeError):
        loaded.count(table, wide, [0], b"a", 0, 9)
    with pytest.raises(ValueError, match="2\\*\\*bits"):
        loaded.count(bytearray(100), array("H", [0]) * 256, [0], b"a", 0, 9, 9, 0)
    with pytest.raises(ValueError, match="4 bytes"):
        loaded.count(table, array("H", [0]) * 256, [0], b"a", 0, 10, 9, 0)
    with pytest.raises(ValueError, match="no room"):
        loaded.count(table, wide, [0], b"a\rb\rc", 0, 10, 9, 0)
    assert table == bytearray(1 << 9)
    with pytest.raises(ValueError, match="out of range"):
        loaded.place(table, 512, 4)
