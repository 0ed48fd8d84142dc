"""The sans-I/O HTTP/1.1 response reader: heads, the three body framings, connection reuse,
malformed input, and independence from how bytes are split."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.codecs.http1 import (
    MAX_HEAD,
    ProtocolError,
    ResponseHead,
    ResponseReader,
    Truncated,
    request_head,
)
from tests.reliability.properties import feed_response, pieces

CAPTURES = Path(__file__).parent.parent / "data" / "captures" / "vllm-0.32.0"
#: vLLM 0.32.0's head for a stream, as captured (the body there is already de-chunked).
VLLM_HEAD = (CAPTURES / "response_headers_stream.txt").read_bytes().split(b"\r\n\r\n", 1)[0]
EVENTS = (CAPTURES / "chat_thinking_loop_usage.sse").read_bytes()


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def vllm_wire(events: bytes = EVENTS) -> bytes:
    """A vLLM stream as uvicorn writes it: the head, then one chunk per SSE event."""
    head = VLLM_HEAD + b"\r\n\r\n"
    body = b"".join(chunk(e + b"\n\n") for e in events.split(b"\n\n") if e)
    return head + body + b"0\r\n\r\n"


def read_all(reads: list[bytes]) -> tuple[ResponseHead, bytes, ResponseReader]:
    """Feed ``reads`` as socket reads; the head, the body and the reader after them."""
    reader = ResponseReader()
    head, body = feed_response(reader, reads)
    assert head is not None
    return head, body, reader


def feed_each(feed: Callable[[bytes], object], pieces: list[bytes]) -> None:
    """Call ``feed`` on each piece in turn."""
    for piece in pieces:
        feed(piece)


def test_vllm_stream_head_and_body() -> None:
    """A captured vLLM stream: status, headers by any case, the events byte for byte, and a
    keep-alive connection at the end."""
    head, body, reader = read_all([vllm_wire()])
    assert (head.status, head.reason, head.http11) == (200, "OK", True)
    assert head.headers["Content-Type"] == "text/event-stream; charset=utf-8"
    assert head.headers["server"] == "uvicorn"
    assert body == EVENTS
    assert reader.done
    assert reader.reusable


def test_one_chunk_per_read_is_the_payload() -> None:
    """The fast path: a read that is exactly one chunk gives that chunk's data."""
    reader = ResponseReader()
    assert reader.head(VLLM_HEAD + b"\r\n\r\n") is not None
    for event in (b"data: 1\n\n", b"x" * 300, b"\r\n"):
        assert reader.body(chunk(event)) == event
    assert not reader.done
    assert reader.body(b"0\r\n\r\n") == b""
    assert reader.done
    assert reader.reusable


def test_byte_by_byte() -> None:
    """Fed one byte at a time, the body is the same."""
    wire = vllm_wire()
    head, body, reader = read_all([wire[i:i + 1] for i in range(len(wire))])
    assert head.status == 200
    assert body == EVENTS
    assert reader.done


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=40_000), max_size=40))
def test_any_split(cuts: list[int]) -> None:
    """However the bytes are split into reads, the body is the same."""
    _, body, reader = read_all(pieces(vllm_wire(), cuts))
    assert body == EVENTS
    assert reader.done
    assert reader.reusable


def test_chunk_extensions_and_trailers() -> None:
    """Chunk extensions and trailer fields are read past; the data is kept."""
    wire = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5;name=value\r\nhello\r\n1 \r\n!\r\n0;last\r\nX-Trailer: 1\r\n\r\n")
    _, body, reader = read_all([wire])
    assert body == b"hello!"
    assert reader.done
    assert reader.reusable


def test_interim_heads_are_skipped() -> None:
    """A 100 Continue or 103 Early Hints head before the final one is skipped."""
    wire = (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
            b"HTTP/1.1 400 Bad Request\r\nContent-Length: 2\r\n\r\nno")
    head, body, reader = read_all([wire])
    assert (head.status, body) == (400, b"no")
    assert "Link" not in head.headers
    assert reader.done
    assert reader.reusable


def test_content_length_body() -> None:
    """A ``Content-Length`` body ends after that many bytes, split or not."""
    wire = b"HTTP/1.1 404 Not Found\r\nContent-Length: 11\r\n\r\n{\"e\":\"no\"}\n"
    for reads in ([wire], [wire[:40], wire[40:50], wire[50:]]):
        head, body, reader = read_all(reads)
        assert (head.status, body) == (404, b'{"e":"no"}\n')
        assert reader.done
        assert reader.reusable


def test_empty_bodies() -> None:
    """204, and ``Content-Length: 0``, end with the head."""
    for wire in (b"HTTP/1.1 204 No Content\r\n\r\n",
                 b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"):
        reader = ResponseReader()
        assert reader.head(wire) is not None
        assert reader.done
        assert reader.reusable
        assert reader.body(b"") == b""


def test_body_until_close() -> None:
    """Without a length or chunking the body runs to the close, which ends it cleanly; the
    connection is not reused."""
    reader = ResponseReader()
    assert reader.head(b"HTTP/1.1 500 Internal Server Error\r\n\r\nboo") is not None
    assert reader.body(b"") == b"boo"
    assert reader.body(b"m") == b"m"
    assert not reader.done
    reader.eof()
    assert reader.done
    assert not reader.reusable


@pytest.mark.parametrize(("wire", "cut"), [
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", "mid-chunk"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", "between chunks"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "short of the length"),
])
def test_close_before_the_end_is_truncated(wire: bytes, cut: str) -> None:
    """A close before the framing's end raises ``Truncated`` ({cut})."""
    reader = ResponseReader()
    assert reader.head(wire) is not None, cut
    reader.body(b"")
    with pytest.raises(Truncated):
        reader.eof()


@pytest.mark.parametrize("head", [
    b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nextra",
])
def test_not_reusable(head: bytes) -> None:
    """Close asked for, HTTP/1.0, a length beside chunking, or bytes after the end: the
    response is read, and the connection is not used again."""
    reader = ResponseReader()
    assert reader.head(head) is not None
    reader.body(b"")
    assert reader.done
    assert not reader.reusable


def test_bytes_after_a_chunked_end_spoil_reuse() -> None:
    """Bytes after the last chunk are dropped and the connection is not reused."""
    _, body, reader = read_all([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                                b"1\r\na\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n"])
    assert body == b"a"
    assert reader.done
    assert not reader.reusable


def test_other_transfer_coding_reads_to_close() -> None:
    """A transfer coding that does not end in chunked is framed by the close."""
    reader = ResponseReader()
    assert reader.head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nab") is not None
    assert reader.body(b"") == b"ab"
    reader.eof()
    assert reader.done
    assert not reader.reusable


@pytest.mark.parametrize("wire", [
    b"HTTP/2 200 OK\r\n\r\n",
    b"ICY 200 OK\r\n\r\n",
    b"HTTP/1.1 2000 OK\r\n\r\n",
    b"HTTP/1.1 abc OK\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nbad name: x\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 3, 4\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 0x10\r\n\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
])
def test_malformed_heads(wire: bytes) -> None:
    """A head that cannot be framed safely raises ``ProtocolError``."""
    with pytest.raises(ProtocolError):
        ResponseReader().head(wire)


def test_repeated_equal_content_lengths_are_one() -> None:
    """``Content-Length: 2, 2`` (or the field twice) is a length of 2 (RFC 9110 §8.6)."""
    for wire in (b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok",
                 b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok"):
        _, body, reader = read_all([wire])
        assert body == b"ok"
        assert reader.done


def test_head_too_large() -> None:
    """A head that never ends is refused once it passes ``MAX_HEAD`` bytes."""
    reader = ResponseReader()
    assert reader.head(b"HTTP/1.1 200 OK\r\n") is None
    with pytest.raises(ProtocolError, match="head over"):
        feed_each(reader.head, [b"X-Pad: " + b"a" * 1000 + b"\r\n"] * (MAX_HEAD // 1000 + 2))


@pytest.mark.parametrize("body", [
    b"zz\r\nhello\r\n",  # not hex
    b"0x5\r\nhello\r\n",  # a prefix int() would take
    b"-5\r\nhello\r\n",
    b"+5\r\nhello\r\n",
    b"5\r\nhelloXX",  # data not followed by CRLF
    b"1" * 20 + b"\r\n",  # a size nobody sends
    b"1" * 2000,  # a size line that never ends
])
def test_malformed_chunks(body: bytes) -> None:
    """A chunk framing error raises ``ProtocolError``, on the fast path and off it."""
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    reader = ResponseReader()
    assert reader.head(head) is not None
    with pytest.raises(ProtocolError):
        reader.body(body)
    reader = ResponseReader()
    assert reader.head(head) is not None
    with pytest.raises(ProtocolError):
        feed_each(reader.body, [body[i:i + 1] for i in range(len(body))])


def test_request_head() -> None:
    """The request head: request line, Host, the headers in order, then the length."""
    head = request_head("POST", "/pre/v1/chat/completions", "[::1]:8001",
                        [("Authorization", "Bearer x"), ("Content-Type", "application/json")],
                        12)
    assert head == (b"POST /pre/v1/chat/completions HTTP/1.1\r\nHost: [::1]:8001\r\n"
                    b"Authorization: Bearer x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 12\r\n\r\n")


def test_header_bytes_round_trip() -> None:
    """Header values keep their bytes both ways, UTF-8 or not (as aiohttp decodes them)."""
    value = b"caf\xc3\xa9 \xe4\xb8\xad \xff".decode("utf-8", "surrogateescape")
    head = request_head("POST", "/", "h", [("X-Name", value)], 0)
    assert b"X-Name: caf\xc3\xa9 \xe4\xb8\xad \xff\r\n" in head
    reader = ResponseReader()
    got = reader.head(b"HTTP/1.1 200 OK\r\nX-Name: caf\xc3\xa9 \xff\r\nContent-Length: 0\r\n\r\n")
    assert got is not None
    assert got.headers["X-Name"].encode("utf-8", "surrogateescape") == b"caf\xc3\xa9 \xff"


@pytest.mark.parametrize("header", [("X-A", "1\r\nX-Injected: 1"), ("X-A\n", "1"), ("X:A", "1")])
def test_request_head_refuses_injection(header: tuple[str, str]) -> None:
    """A header name or value that would end the line or the name is refused."""
    with pytest.raises(ValueError, match="cannot be sent"):
        request_head("POST", "/", "h", [header], 0)
