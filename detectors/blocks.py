"""Cutting a channel's text into fixed blocks, so chunking never changes a verdict.

The per-delta path only appends to a list and bumps counters. Text detectors look at the
stream in blocks of exactly :data:`BLOCK_CHARS` characters, cut at fixed offsets of the
channel's text, never at delta boundaries. Whatever the split of the deltas, the same blocks
reach the detectors, so the same verdict fires at the same ``at_char``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from detectors.blocktokens import MAX_INDENT, ascii_tokens
from detectors.tokenize import CJK_RANGES, TOKEN_RE

#: Text detectors run once per this many characters of a channel.
BLOCK_CHARS: Final[int] = 256
#: A word longer than this is processed in pieces rather than carried forever.
_MAX_CARRY: Final[int] = 128
#: The tokens of a block that is not ASCII (those of ASCII text are ``ascii_tokens``'),
#: with line breaks kept with up to ``MAX_INDENT`` spaces and tabs of indentation.
_DETECT_RE = re.compile(rf"{TOKEN_RE.pattern}|\n[ \t]{{0,{MAX_INDENT}}}")
_WORD_RE = re.compile(rf"[^\W{CJK_RANGES}]+")


@dataclass(frozen=True, slots=True)
class Block:
    """One fixed slice of a channel, produced when the channel's text crosses a multiple of
    :data:`BLOCK_CHARS`. ``toks`` are the complete pseudo-tokens that end inside the slice
    (a word cut by the slice's end is carried into the next block); a line break is kept as
    a token that starts with ``"\\n"`` and holds the next line's indentation (spaces and
    tabs, up to 64), so code can be told from prose; a line break at the slice's end is
    carried too, since its indentation may continue in the next delta. ``end`` is the
    channel offset just after the slice."""

    text: str
    toks: list[str]
    end: int


class Blocker:
    """Accumulates a channel's deltas and hands out :class:`Block` values."""

    __slots__ = ("_carry", "_cut", "pending")

    def __init__(self) -> None:
        #: The text since the last block, one string, always shorter than ``BLOCK_CHARS``:
        #: the deltas themselves are not kept (a list of them held ~25 small strings,
        #: 1.4 KiB, per idle stream). A caller may append a delta here itself when the
        #: sum stays shorter than ``BLOCK_CHARS`` (what ``push`` would do, without a call).
        self.pending = ""
        self._carry = ""
        # Characters handed out in blocks so far (the channel's offset where ``pending`` starts).
        self._cut = 0

    @property
    def chars(self) -> int:
        """Characters of this channel seen so far."""
        return self._cut + len(self.pending)

    def push(self, text: str) -> list[Block] | None:
        """Take a delta; return the blocks it completes, or None (the common case)."""
        buf = self.pending + text
        if len(buf) < BLOCK_CHARS:
            self.pending = buf
            return None
        blocks: list[Block] = []
        start_end = self._cut
        pos = 0
        while len(buf) - pos >= BLOCK_CHARS:
            piece = buf[pos : pos + BLOCK_CHARS]
            pos += BLOCK_CHARS
            blocks.append(self._block(piece, start_end + pos))
        self.pending = buf[pos:]
        self._cut = start_end + pos
        return blocks

    def _block(self, piece: str, end: int) -> Block:
        text = self._carry + piece
        toks = ascii_tokens(text) if text.isascii() else _DETECT_RE.findall(text)
        self._carry = ""
        # A word touching the slice's end may continue in the next delta: carry it over.
        if toks:
            last = toks[-1]
            if (
                len(last) < _MAX_CARRY
                and text.endswith(last)
                and (last[0] == "\n" or _WORD_RE.fullmatch(last))
            ):
                self._carry = last
                toks.pop()
        return Block(piece, toks, end)


class KeepingBlocker(Blocker):
    """A :class:`Blocker` that also keeps the channel's text, up to ``limit`` characters,
    as the blocks it hands out (for a trace recorder: ``Chain.keep_thinking``). Keeping
    costs nothing per delta, only a step per 256-character block."""

    __slots__ = ("_limit", "kept")

    def __init__(self, limit: int) -> None:
        super().__init__()
        self._limit = limit
        #: The blocks' text so far (while it is shorter than ``limit``).
        self.kept: list[str] = []

    def push(self, text: str) -> list[Block] | None:
        """As :meth:`Blocker.push`; the blocks' text is kept too."""
        blocks = super().push(text)
        if blocks is not None and self._cut - BLOCK_CHARS * len(blocks) < self._limit:
            self.kept += [b.text for b in blocks]
        return blocks

    def text(self) -> tuple[str, int]:
        """The channel's text kept (its first ``limit`` characters at most) and the
        characters the channel has had in all."""
        return ("".join(self.kept) + self.pending)[: self._limit], self.chars
