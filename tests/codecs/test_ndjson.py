"""The NDJSON decoder: lines with their exact bytes, split anywhere, bounded (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.codecs.ndjson import NDJSONDecoder, NDJSONError
from tests.reliability.properties import pieces

STREAM = b'{"a":1}\n{"b":"\xc3\xa9"}\r\n\n{"c":3}'


def test_lines_keep_their_bytes_and_drop_their_endings() -> None:
    """Each line's ``raw`` has its newline (CRLF kept), ``data`` has none; blank lines
    stay as empty data; an unterminated last line is what ``close`` returns."""
    dec = NDJSONDecoder()
    lines = dec.feed(STREAM)
    assert [(ln.raw, ln.data) for ln in lines] == [
        (b'{"a":1}\n', b'{"a":1}'), (b'{"b":"\xc3\xa9"}\r\n', b'{"b":"\xc3\xa9"}'),
        (b"\n", b"")]
    assert dec.close() == b'{"c":3}'
    assert dec.close() == b""


@given(cuts=st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_split_gives_the_same_lines(cuts: list[int]) -> None:
    """Fed in pieces, the decoder gives the lines and leftover it gives for the whole."""
    dec = NDJSONDecoder()
    got = [ln for piece in pieces(STREAM, cuts) for ln in dec.feed(piece)]
    whole = NDJSONDecoder()
    assert got == whole.feed(STREAM)
    assert dec.close() == whole.close()
    assert b"".join(ln.raw for ln in got) + b'{"c":3}' == STREAM


def test_a_line_past_the_limit_is_an_error() -> None:
    """A line that grows past ``max_line_bytes`` without a newline raises NDJSONError;
    lines within the limit do not."""
    dec = NDJSONDecoder(max_line_bytes=16)
    assert dec.feed(b'{"x":"0123456"}\n') != []
    with pytest.raises(NDJSONError):
        dec.feed(b'{"x":"0123456789abcdef"')
