"""The SSE decoder: framing, comments, errors, and independence from how bytes are split."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.codecs.sse import SSEDecoder, SSEError, SSEEvent

CAPTURES = Path(__file__).parent.parent / "data" / "captures" / "vllm-0.32.0"
SSE_FILES = sorted(p for p in CAPTURES.glob("*.sse"))


def decode_all(chunks: list[bytes]) -> tuple[list[SSEEvent], bytes]:
    dec = SSEDecoder()
    events: list[SSEEvent] = []
    for chunk in chunks:
        events += dec.feed(chunk)
    tail, rest = dec.close()
    return events + tail, rest


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, prev = [], 0
    for p in points:
        pieces.append(data[prev:p])
        prev = p
    pieces.append(data[prev:])
    return pieces


def test_single_data_event() -> None:
    """A one-line ``data:`` event yields its payload and keeps its raw bytes."""
    events, rest = decode_all([b'data: {"a":1}\n\n'])
    assert events == [SSEEvent(b'data: {"a":1}\n\n', b'{"a":1}')]
    assert rest == b""


def test_comment_multiline_and_other_fields() -> None:
    """Comments give data None; multiple data lines join with LF; other fields are ignored."""
    events, _ = decode_all([b": keep-alive\n\nevent: x\ndata: a\ndata:b\nid: 7\n\n"])
    assert [e.data for e in events] == [None, b"a\nb"]


@pytest.mark.parametrize("sep", [b"\r\n", b"\r", b"\n"])
def test_line_endings(sep: bytes) -> None:
    """CRLF, CR and LF line endings all frame events, byte by byte too."""
    data = b"data: one" + sep + sep + b"data: two" + sep + b"data: 2b" + sep + sep
    whole, _ = decode_all([data])
    bytewise, _ = decode_all([data[i : i + 1] for i in range(len(data))])
    assert [e.data for e in whole] == [b"one", b"two\n2b"]
    assert bytewise == whole


def test_crlf_split_between_cr_and_lf() -> None:
    """A CRLF split between its two bytes is not read as two line endings."""
    events, _ = decode_all([b"data: a\r", b"\ndata: b\r\n\r", b"\n"])
    assert [e.data for e in events] == [b"a\nb"]


def test_unterminated_tail_is_returned_on_close() -> None:
    """A stream that ends mid-event hands the leftover bytes back verbatim."""
    events, rest = decode_all([b"data: [DONE]\n\ndata: {\"x\""])
    assert [e.data for e in events] == [b"[DONE]"]
    assert rest == b'data: {"x"'


def test_oversized_event_is_an_error() -> None:
    """One event larger than the limit raises instead of buffering forever."""
    dec = SSEDecoder(max_event_bytes=1024)
    with pytest.raises(SSEError):
        dec.feed(b"data: " + b"x" * 2000)


def test_utf8_split_inside_character() -> None:
    """A multi-byte character split across chunks comes out whole."""
    data = 'data: {"t":"잠깐 思考"}\n\n'.encode()
    events, _ = decode_all([data[:12], data[12:13], data[13:]])
    assert events[0].data is not None
    assert events[0].data.decode() == '{"t":"잠깐 思考"}'


@pytest.mark.parametrize("path", SSE_FILES, ids=lambda p: p.name)
def test_captures_roundtrip(path: Path) -> None:
    """Every captured vLLM stream decodes to data events whose raw bytes rebuild it."""
    data = path.read_bytes()
    events, rest = decode_all([data])
    assert b"".join(e.raw for e in events) + rest == data
    assert events[-1].data == b"[DONE]"
    assert all(e.data is not None and e.raw.startswith(b"data: ") for e in events)


@settings(max_examples=60, deadline=None)
@given(index=st.integers(0, len(SSE_FILES) - 1),
       cuts=st.lists(st.integers(0, 10**6), max_size=40),
       crlf=st.booleans())
def test_any_split_gives_same_events(index: int, cuts: list[int], crlf: bool) -> None:
    """Any split of any captured stream (LF or CRLF framed) gives the same events."""
    data = SSE_FILES[index].read_bytes()
    if crlf:
        data = data.replace(b"\n", b"\r\n")
    whole, rest_whole = decode_all([data])
    split, rest_split = decode_all(split_at(data, cuts))
    assert split == whole
    assert rest_split == rest_whole
    assert b"".join(e.raw for e in split) + rest_split == data
