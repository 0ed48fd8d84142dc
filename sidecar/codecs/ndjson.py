"""A sans-I/O newline-delimited JSON decoder: bytes in, lines out.

``NDJSONDecoder.feed`` accepts bytes split anywhere and returns the lines completed so
far, each with its exact bytes (``raw``, newline included) so the proxy can forward
them unchanged, and its payload (``data``, without the line ending; blank lines are
kept with empty ``data``). The concatenation of every ``raw`` plus ``close()`` is the
input. JSON itself is not parsed here.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_LINE_BYTES = 8 * 1024 * 1024


class NDJSONError(ValueError):
    """The stream is not NDJSON, e.g. one line grew past the size limit."""


@dataclass(frozen=True, slots=True)
class Line:
    """One complete line: ``raw`` with its ``\\n``, ``data`` without ``\\r?\\n``."""

    raw: bytes
    data: bytes


class NDJSONDecoder:
    """Incremental line splitter; one per stream."""

    __slots__ = ("_buf", "_max")

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self._buf = b""
        self._max = max_line_bytes

    def feed(self, chunk: bytes) -> list[Line]:
        """Add bytes; return the lines they complete. Raises ``NDJSONError`` when a
        single line exceeds ``max_line_bytes``."""
        buf = self._buf + chunk if self._buf else chunk
        lines: list[Line] = []
        pos = 0
        while (end := buf.find(b"\n", pos)) >= 0:
            raw = buf[pos : end + 1]
            data = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
            lines.append(Line(raw, data))
            pos = end + 1
        self._buf = buf[pos:]
        if len(self._buf) > self._max:
            raise NDJSONError(f"an NDJSON line exceeded {self._max} bytes")
        return lines

    def close(self) -> bytes:
        """End of stream: the bytes of an unterminated last line (may be empty)."""
        rest, self._buf = self._buf, b""
        return rest
