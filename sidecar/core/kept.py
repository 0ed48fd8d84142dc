"""Text kept delta by delta, bounded (pure): a choice's reasoning for salvage or the trace
recorder, a Responses item's text a cut leaves open."""

from __future__ import annotations

from typing import Final

MAX_KEPT_REASONING: Final[int] = 32 * 1024  # characters of text a ``KeptText`` keeps
_KEEP_JOIN: Final[int] = 64  # kept deltas are joined into one string this often (``KeptText``)


class KeptText:
    """Text kept delta by delta, bounded: each delta is kept while the ones before it hold
    fewer than ``limit`` (``MAX_KEPT_REASONING``) characters; later ones are not (the
    text of a choice for salvage or the trace recorder, of a Responses item a cut leaves
    open).

    Every ``_KEEP_JOIN`` deltas are joined into one string, and every ``_KEEP_JOIN`` of
    those into one: a string per token would cost an object per token for a few
    characters, and re-joining all the text every ``_KEEP_JOIN`` deltas would copy it
    (up to 32 KiB, re-read from memory) hundreds of times over; this copies it a few
    times."""

    __slots__ = ("_chunks", "_kept", "_limit", "_pieces")

    def __init__(self, limit: int = MAX_KEPT_REASONING) -> None:
        # The latest deltas, the strings earlier ones were joined into, and the
        # characters of both.
        self._pieces: list[str] = []
        self._chunks: list[str] = []
        self._kept = 0
        self._limit = limit

    def keep(self, text: str) -> None:
        """One delta (once per delta: the per-event path)."""
        kept = self._kept
        if kept >= self._limit:
            return
        self._kept = kept + len(text)
        pieces = self._pieces
        pieces.append(text)
        if len(pieces) >= _KEEP_JOIN:
            chunks = self._chunks
            chunks.append("".join(pieces))
            self._pieces = []
            if len(chunks) >= _KEEP_JOIN:
                self._chunks = ["".join(chunks)]

    def keep_all(self, texts: list[str], joined: str) -> None:
        """The deltas ``texts`` (not empty), whose join is ``joined``: kept as ``keep``
        would keep them one by one, in one piece when it keeps them all."""
        if self._kept + len(joined) - len(texts[-1]) < self._limit:
            self.keep(joined)
        else:
            for text in texts:
                self.keep(text)

    def text(self) -> str:
        """The text kept: the deltas up to the first one that brings it to ``limit``
        characters, that one included."""
        return "".join(self._chunks) + "".join(self._pieces)

    def clear(self) -> None:
        """Start over, empty (in place: a keeper's bound ``keep`` stays valid)."""
        self._pieces, self._chunks, self._kept = [], [], 0

    def __len__(self) -> int:
        """The characters kept."""
        return self._kept
