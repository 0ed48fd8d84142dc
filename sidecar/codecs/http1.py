"""HTTP/1.1 for the watched upstream requests (pure, sans-I/O): the request head to write,
and a reader that turns the response's bytes into its head and then its body.

Why not aiohttp's client here: a watched stream is read one event at a time, and aiohttp's
client does more Python work per event on its reader (the payload queue, the HTTP chunk
bookkeeping, flow control on every read, a future per read) than the sidecar's own
watching does (measured in
``benchmarks/results/2026-12-04-09-stop-23-watched-read-path.md``). This reader's
fast path is one ``find`` and one slice per event. Everything that is not
watched (pass-through routes, health probes) still goes through aiohttp.

The reader is fed whatever the socket gave; it never reads the clock and never blocks.

- :meth:`ResponseReader.head` buffers bytes until the head is complete (1xx interim heads
  are skipped) and returns it; its framing decides how the body ends (RFC 9112 §6.3):
  chunked, ``Content-Length``, or the connection's close. Anything it cannot frame
  safely raises :class:`ProtocolError`: a bad status line or header, a bad or conflicting
  ``Content-Length``, a head over :data:`MAX_HEAD` bytes.
- :meth:`ResponseReader.body` decodes the bytes after the head and returns the body bytes
  they carry (``b""`` for framing only). :attr:`ResponseReader.done` turns true at the end
  of the message. Bytes after it are dropped, and the connection is not reused (we never
  pipeline, so a server that sends them is not to be trusted with another request).
- :meth:`ResponseReader.eof` is called when the connection closed: the end of a body
  framed by the close, otherwise a :class:`Truncated` error.
- :attr:`ResponseReader.reusable`: the message ended where its framing said, on HTTP/1.1,
  and neither side asked to close: the connection may carry the next request.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from multidict import CIMultiDict

#: Largest response head accepted (status line, headers and trailers each).
MAX_HEAD = 64 * 1024
#: Longest chunk-size line accepted (size and extensions).
_MAX_SIZE_LINE = 1024
_HEX = b"0123456789abcdefABCDEF"
_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")

# Body framing of a response.
_NONE, _LENGTH, _CHUNKED, _CLOSE = range(4)
# Chunked decoder states: at a size line, inside a chunk's data, at the CRLF after it,
# in the trailers after the last chunk.
_SIZE, _DATA, _DATA_END, _TRAILERS = range(4)


class ProtocolError(ValueError):
    """The upstream's response cannot be read as HTTP/1.1."""


class Truncated(ProtocolError):
    """The connection closed before the response's framing said it ended."""


@dataclass(frozen=True, slots=True)
class ResponseHead:
    """A final (non-1xx) response head, produced once the blank line after it arrived."""

    status: int
    reason: str
    headers: CIMultiDict[str]
    http11: bool  # HTTP/1.1 (else HTTP/1.0)


def request_head(method: str, target: str, host: str, headers: Iterable[tuple[str, str]],
                 length: int) -> bytes:
    """The head of a request with a body of ``length`` bytes. ``headers`` must not carry
    ``Host``, ``Content-Length`` or ``Transfer-Encoding`` (``forward_headers`` drops them);
    names and values with a CR or LF raise :class:`ValueError` (no header injection)."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    for name, value in headers:
        if "\r" in name or "\n" in name or "\r" in value or "\n" in value or ":" in name:
            raise ValueError(f"header {name!r} cannot be sent")
        lines.append(f"{name}: {value}")
    lines.append(f"Content-Length: {length}")
    # aiohttp decodes the client's header values as UTF-8, keeping undecodable bytes as
    # surrogates: encoding them back the same way sends the client's bytes unchanged.
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape")


def _parse_head(raw: bytes) -> ResponseHead:
    lines = raw.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    version = parts[0]
    if (len(parts) < 2 or version not in (b"HTTP/1.1", b"HTTP/1.0") or len(parts[1]) != 3
            or not parts[1].isdigit()):
        raise ProtocolError(f"bad status line {lines[0][:80]!r}")
    headers: CIMultiDict[str] = CIMultiDict()
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or not set(name) <= _TOKEN:
            raise ProtocolError(f"bad header line {line[:80]!r}")
        # As aiohttp does, so a value relayed to the client keeps its bytes.
        headers.add(name.decode("ascii"), value.strip(b" \t").decode("utf-8", "surrogateescape"))
    reason = parts[2].decode("latin-1") if len(parts) > 2 else ""
    return ResponseHead(int(parts[1]), reason, headers, version == b"HTTP/1.1")


def _tokens(headers: CIMultiDict[str], name: str) -> list[str]:
    return [t.strip().lower() for v in headers.getall(name, ()) for t in v.split(",")
            if t.strip()]


class ResponseReader:
    """One response on one connection; see the module docstring for the contract."""

    __slots__ = ("_buf", "_framing", "_left", "_state", "done", "reusable")

    def __init__(self) -> None:
        self._buf = b""
        self._framing = _NONE
        self._left = 0  # body bytes still due (Content-Length) or in the current chunk
        self._state = _SIZE
        #: The message ended where its framing said.
        self.done = False
        #: The connection may carry another request (set when ``done``).
        self.reusable = False

    def head(self, data: bytes) -> ResponseHead | None:
        """Take bytes before the head is complete; return the final head once it is. The
        bytes after it stay buffered: pass ``b""`` to :meth:`body` to get them."""
        buf = self._buf + data if self._buf else data
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    raise ProtocolError(f"response head over {MAX_HEAD} bytes")
                self._buf = buf
                return None
            if end > MAX_HEAD:
                raise ProtocolError(f"response head over {MAX_HEAD} bytes")
            head = _parse_head(buf[:end])
            buf = buf[end + 4:]
            if 100 <= head.status < 200:  # interim (100 Continue, 103 Early Hints): skip
                if head.status == 101:
                    raise ProtocolError("upstream switched protocols")
                continue
            self._buf = buf
            self._frame(head)
            return head

    def _frame(self, head: ResponseHead) -> None:
        headers = head.headers
        close = "close" in _tokens(headers, "Connection") or not head.http11
        if head.status in (204, 304):
            self._framing = _NONE
        elif "Transfer-Encoding" in headers:
            codings = _tokens(headers, "Transfer-Encoding")
            if codings and codings[-1] == "chunked":
                self._framing = _CHUNKED
                # Both: the length is ignored and the connection not trusted again.
                close = close or "Content-Length" in headers
            else:
                self._framing, close = _CLOSE, True
        elif "Content-Length" in headers:
            values = {v.strip() for v in ",".join(headers.getall("Content-Length")).split(",")}
            value = values.pop() if len(values) == 1 else ""
            if not value.isdigit() or not value.isascii():
                raise ProtocolError(f"bad Content-Length {headers.getall('Content-Length')!r}")
            self._framing, self._left = _LENGTH, int(value)
        else:
            self._framing, close = _CLOSE, True
        self.reusable = not close
        if self._framing == _NONE or (self._framing == _LENGTH and not self._left):
            self._finish()

    def _finish(self) -> None:
        self.done = True
        if self._buf:
            self._buf = b""
            self.reusable = False

    def body(self, data: bytes) -> bytes:
        """The body bytes that ``data`` (the socket's next bytes) completes."""
        if self.done:
            if data:
                self.reusable = False
            return b""
        framing = self._framing
        if framing == _CHUNKED:
            if not self._buf and self._state == _SIZE:
                # One whole chunk per read, as a streaming server writes them: the fast path.
                i = data.find(b"\r\n")
                if 0 < i < 16 and data.endswith(b"\r\n") and not data[:i].strip(_HEX):
                    size = int(data[:i], 16)
                    if size and len(data) == i + size + 4:
                        return data[i + 2:-2]
            return self._chunked(data)
        buf = self._buf + data if self._buf else data
        self._buf = b""
        if framing == _CLOSE:
            return buf
        if framing == _LENGTH:
            if len(buf) < self._left:
                self._left -= len(buf)
                return buf
            out, rest = buf[:self._left], buf[self._left:]
            self._left = 0
            self._buf = rest
            self._finish()
            return out
        return b""  # _NONE: ``done`` already

    def _chunked(self, data: bytes) -> bytes:
        buf = self._buf + data if self._buf else data
        out: list[bytes] = []
        pos, n = 0, len(buf)
        state, left = self._state, self._left
        while pos < n:
            if state == _DATA:
                take = min(left, n - pos)
                out.append(buf[pos:pos + take])
                pos += take
                left -= take
                if left:
                    break
                state = _DATA_END
            elif state == _DATA_END:
                if n - pos < 2:
                    break
                if buf[pos:pos + 2] != b"\r\n":
                    raise ProtocolError("chunk data not followed by CRLF")
                pos += 2
                state = _SIZE
            elif state == _SIZE:
                i = buf.find(b"\r\n", pos)
                if i < 0:
                    if n - pos > _MAX_SIZE_LINE:
                        raise ProtocolError("chunk-size line too long")
                    break
                digits = buf[pos:i].split(b";", 1)[0].strip(b" \t")
                if not digits or len(digits) > 15 or digits.strip(_HEX):
                    raise ProtocolError(f"bad chunk size {buf[pos:i][:40]!r}")
                left = int(digits, 16)
                pos = i + 2
                state = _DATA if left else _TRAILERS
            else:  # _TRAILERS: lines up to an empty one, ignored
                i = buf.find(b"\r\n", pos)
                if i < 0:
                    if n - pos > MAX_HEAD:
                        raise ProtocolError(f"trailers over {MAX_HEAD} bytes")
                    break
                if i == pos:
                    self._buf = buf[i + 2:]
                    self._state, self._left = state, 0
                    self._finish()
                    return b"".join(out)
                pos = i + 2
        self._buf = buf[pos:]
        self._state, self._left = state, left
        return out[0] if len(out) == 1 else b"".join(out)

    def eof(self) -> None:
        """The connection closed: fine for a body framed by the close (it ends here) or
        after the end; raises :class:`Truncated` otherwise."""
        if self.done:
            return
        if self._framing == _CLOSE:
            self.done = True
            self.reusable = False
            return
        raise Truncated("upstream closed the connection mid-response")
