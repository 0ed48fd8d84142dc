"""A sans-I/O Server-Sent Events decoder: bytes in, events out.

``SSEDecoder.feed`` accepts bytes split anywhere (inside a UTF-8 character, inside a
``\\r\\n``, inside the ``data:`` prefix) and returns the events completed so far. Each
event keeps its exact original bytes in ``raw`` so the proxy can forward what the
upstream sent without re-serializing it. The concatenation of every ``raw`` plus
``SSEDecoder.close()``'s events and leftover is exactly the input.

Line endings follow the SSE spec: ``\\r\\n``, ``\\r`` or ``\\n``. Only ``data`` fields
are interpreted; ``event``, ``id`` and ``retry`` stay in ``raw``. Comment lines (``:``)
make an event with ``data is None``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# One line ending, then a second one: the blank line that ends an event. A lone CR is a
# line ending only when no LF follows it; a CR at the very end of the buffer is held
# back until the next byte tells which it is.
_BOUNDARY = re.compile(rb"(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r(?!\n)|\n)")
_LINE_SPLIT = re.compile(rb"\r\n|\r|\n")

DEFAULT_MAX_EVENT_BYTES = 8 * 1024 * 1024


class SSEError(ValueError):
    """The stream is not valid SSE, e.g. one event grew past the size limit."""


@dataclass(slots=True)
class SSEEvent:
    """A complete event. ``data`` is the joined ``data:`` lines (None for comment-only
    events), ``raw`` the exact bytes of the event including its terminating blank line.

    Read-only by contract but not ``frozen``: one is made per upstream event, and a
    frozen dataclass pays an ``object.__setattr__`` per field to construct, a measurable
    share of the sidecar's own work per event (``benchmarks/results/``)."""

    raw: bytes
    data: bytes | None


class SSEDecoder:
    """Incremental decoder; one per stream."""

    __slots__ = ("_buf", "_crlf", "_max", "idle")

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self._buf = b""
        self._crlf = False  # set once a CR is seen: the fast LF-only path no longer applies
        #: Nothing is pending and no CR was seen: a chunk that is exactly one whole
        #: single-line ``data:`` event (LF framing) is then that event, with no ``feed``.
        #: Read once per upstream read, so an attribute, kept by ``feed`` and ``close``.
        self.idle = True
        self._max = max_event_bytes

    def whole(self, chunk: bytes) -> bytes | None:
        """The ``data`` of ``chunk`` when it is exactly one whole single-line ``data:``
        event (LF framing) and nothing is pending; else None. A chunk with a ``data`` here
        needs no ``feed``: it would return that one event, with ``chunk`` as its ``raw``,
        and leave the decoder as it was. At a paced load nearly every read is such a chunk;
        those of a learned shape are matched before ``feed`` (``StreamModel.match_event``)
        and the rest come here."""
        # The single-line test of ``_parse``, written out here rather than shared through
        # a function: ``feed`` asks it first, once per upstream read it gets.
        if (not self.idle or not chunk.startswith(b"data: ")
                or chunk.find(b"\n", 6) != len(chunk) - 2 or not chunk.endswith(b"\n\n")
                or b"\r" in chunk):
            return None
        return chunk[6:-2]

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Add bytes; return the events they complete. Raises ``SSEError`` when a single
        event exceeds ``max_event_bytes``."""
        data = self.whole(chunk)
        if data is not None:  # one whole event: its own ``raw``, without a copy
            return [SSEEvent(chunk, data)]
        buf = self._buf + chunk if self._buf else chunk
        if not self._crlf and b"\r" in chunk:
            self._crlf = True
        events: list[SSEEvent] = []
        pos = 0
        if not self._crlf:
            while True:
                end = buf.find(b"\n\n", pos)
                if end < 0:
                    break
                events.append(_parse(buf[pos : end + 2], lf_only=True))
                pos = end + 2
        else:
            endpos = len(buf) - 1 if buf.endswith(b"\r") else len(buf)
            while True:
                m = _BOUNDARY.search(buf, pos, endpos)
                if m is None:
                    break
                events.append(_parse(buf[pos : m.end()], lf_only=False))
                pos = m.end()
        self._buf = buf[pos:]
        self.idle = not self._buf and not self._crlf
        if len(self._buf) > self._max:
            raise SSEError(f"an SSE event exceeded {self._max} bytes")
        return events

    @property
    def pending(self) -> bytes:
        """Bytes received but not yet part of a complete event."""
        return self._buf

    def close(self) -> tuple[list[SSEEvent], bytes]:
        """End of stream: return the events completed by a held-back final CR, and the
        bytes of an unterminated trailing event (the SSE spec discards it; the proxy
        forwards it verbatim so the byte stream stays exact)."""
        buf, self._buf = self._buf, b""
        self.idle = not self._crlf
        events: list[SSEEvent] = []
        pos = 0
        if self._crlf:
            while (m := _BOUNDARY.search(buf, pos)) is not None:
                events.append(_parse(buf[pos : m.end()], lf_only=False))
                pos = m.end()
        return events, buf[pos:]


def _parse(raw: bytes, *, lf_only: bool) -> SSEEvent:
    # Fast path: the overwhelmingly common single-line ``data: {...}\n\n`` event (an
    # LF-framed ``raw`` ends with its only blank line).
    if lf_only and raw.startswith(b"data: ") and raw.find(b"\n", 6) == len(raw) - 2:
        return SSEEvent(raw, raw[6:-2])
    lines = raw.split(b"\n") if lf_only else _LINE_SPLIT.split(raw)
    data: list[bytes] = []
    for line in lines:
        if not line or line.startswith(b":"):
            continue
        name, sep, value = line.partition(b":")
        if name != b"data":
            continue
        if sep and value.startswith(b" "):
            value = value[1:]
        data.append(value)
    return SSEEvent(raw, b"\n".join(data) if data else None)
