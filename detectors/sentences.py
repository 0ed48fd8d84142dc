"""Sentences: much of the recent text is sentences and lines already written before.

A model that ruminates comes back to the same sentences, each only a few times, in a
shifting order and with new sentences between them. No single line comes back often
enough for ``restatement``, and the copies are too scattered for the copied shingles of
``recurrence`` to add up quickly. This detector measures the repetition order-free, at the
level of whole sentences: how much of the recent text is sentences and lines that were
written before, wherever and in whatever order.

The text is cut into *segments* at line ends and at sentence ends (``.``, ``?`` or ``!``
followed by a space; the CJK full stop and full-width ``!`` and ``?``). A segment is
compared with the last :data:`HISTORY` ones ignoring case and spaces (lower-cased, spaces
removed, then hashed), if what is left holds at least ``min_chars`` characters; a segment
longer than :data:`MAX_SEGMENT` characters is not compared (a paragraph that never ends a
sentence is left to the other detectors). Code is not compared: lines inside a ``` fence,
and indented lines that are not list items. Per 256-character block, the characters of the
segments that end in it and were written before (with their separator) are added up; the
detector fires when the last ``window_chars // 256`` blocks hold ``repeat_chars`` of them
(by default 1,200 of the last 4,096, 29%).

Enumerations written as prose: a puzzle search writes candidate schedules as sentences or
lines ("A and B cross, 2 minutes. A returns, 1 minute. ... Total: 17 minutes."), and the
candidates share most of their steps while their totals differ. As with ``recurrence``'s
list rule, such copies count only when the candidate as a whole comes back. The unit is
the paragraph (up to a blank line). A copy that holds a number or a one-letter name (a
capital standing alone, not "I") is held back until the paragraph ends, and then counted
(in the block where it ends) if the paragraph is prose (fewer numbers and names than half
its other words), or if the sequence of its digits and capitals was seen in an earlier
paragraph; else it is dropped. A paragraph longer than :data:`UNIT_MAX` characters is no
enumeration of candidates: what it held counts once it grows past that, and so do its
later copies. Copies of sentences with no number and no name always count.

Calibration (``benchmarks/families.py --margins``): on the 1,885 healthy traces of
tests/data/traces the most such characters in one window is 808, by Claude 3.7 (1,200 is
1.49 times that; DeepHermes-3 788, QwQ-32B 723, Qwen3 652, the others 461 or less). A loop
that keeps coming back to its sentences holds 30-60% of its window (1,200 to 2,400).

Cost: one pass of C string methods over the block, then per line a few, and per segment
of ``min_chars`` or more a CRC-32 and a search of the ring; the paragraph's figures are
read only at its end, and only when it held a copy.

Memory: the ring is a str of :data:`HISTORY` characters beyond the BMP, one per segment or
paragraph (20 bits of its CRC-32; 844 bytes, searched at C speed); the window's per-block
sums (64 bytes); the segment being written (at most :data:`MAX_SEGMENT` characters) and
the paragraph being read (at most :data:`UNIT_MAX`). Two segments whose hashes share 20
bits are taken for one (one lookup in 5,500 with a full ring): a count can only be too
high there, and the calibration above includes it.
"""

from __future__ import annotations

import re
from array import array
from zlib import crc32

from detectors.analyzer import Finding, excerpt
from detectors.base import Evidence
from detectors.blocks import BLOCK_CHARS, Block

#: Segments and paragraphs whose fingerprints are kept.
HISTORY = 192
#: A longer segment is not compared (nor carried from block to block).
MAX_SEGMENT = 512
#: A longer paragraph is no enumeration: its copies count.
UNIT_MAX = 512
#: A fingerprint is one character beyond the BMP (U+10000 to U+10FFFF), so that the ring
#: is a str searched at C speed, one character at a time: 20 bits of a CRC-32.
_FP = 0x10000
_FP_MASK = 0xFFFFF
#: What a paragraph's hash starts from (a paragraph is no segment).
_SALT = 0x5A5A5A
#: Characters (besides indentation) a line needs before it is read as code or not.
_HEAD = 6
#: A copy in the window's sums: its characters << _SHIFT | 1, so that one sum counts both
#: (a window of 4,096 characters holds far fewer than 1,024 segments of 20 or more).
_SHIFT = 10

#: A list item, which stays prose when indented.
_ITEM = re.compile(r"\s*(?:[-*+•·>]|\(?\d{1,3}[.):]|\(?[A-Za-z][.)])[\s\0]")
_ENDS = (".", "?", "!")
#: CJK sentence ends: the ideographic full stop, the full-width exclamation and question marks.
_CJK_ENDS = ("\u3002", "\uff01", "\uff1f")
#: Numbers, and one-letter names (a capital standing alone, not "I"). The capital comes
#: first so that the search skips to candidates at C speed.
_STATE = re.compile(r"\d+|[A-HJ-Z](?<!\w[A-HJ-Z])(?!\w)")
#: The bytes a paragraph's hash leaves out: all but digits and capitals.
_NOT_MARKS = bytes(b for b in range(256) if not (48 <= b <= 57 or 65 <= b <= 90))
#: A line's shape, one byte for one: a digit is "0", a capital "A" (but "I", a pronoun),
#: any other letter or byte of a UTF-8 sequence "a", anything else a space.
_SHAPES = bytes(
    48 if 48 <= b <= 57 else 65 if 65 <= b <= 90 and b != 73
    else 97 if 97 <= b <= 122 or b in (73, 95) or b >= 128 else 32
    for b in range(256)
)


def _prose(data: bytes, chars: int) -> bool:
    """Whether a paragraph (UTF-8, ``chars`` characters) has fewer numbers and one-letter
    names than half its other words: a name is a capital standing alone ("A", "B's"), a
    number a word that starts with a digit ("30", "12L"), a CJK character a word (three
    bytes in UTF-8: two more than its one character)."""
    padded = b"  " + data.translate(_SHAPES).replace(b" ", b"  ") + b" "
    names = padded.count(b" A ")
    marks = names + padded.count(b" 0")
    words = padded.count(b" a") + padded.count(b" A") - names
    return 2 * marks < words + (len(data) - chars) // 2



class SentencesAnalyzer:
    """Block analyzer for one channel; see the module docstring."""

    __slots__ = (
        "_carry",
        "_code",
        "_fence",
        "_held",
        "_ls",
        "_min",
        "_para",
        "_ring",
        "_size",
        "_skip",
        "_threshold",
        "_win",
        "_wpos",
        "_wsum",
        "most",
    )

    def __init__(self, repeat_chars: int = 1200, window_chars: int = 4096,
                 min_chars: int = 20) -> None:
        if window_chars < BLOCK_CHARS or window_chars % BLOCK_CHARS:
            raise ValueError("sentences_window_chars must be a multiple of 256")
        if repeat_chars < 1 or min_chars < 1:
            raise ValueError("sentences_repeat_chars and sentences_min_chars must be positive")
        self._threshold = repeat_chars
        self._min = min_chars
        # The text from the last complete segment on (a segment being written, or a line
        # start too short to read), and whether it is a segment too long to compare (then
        # only its last character is kept, for a sentence end).
        self._carry = ""
        self._skip = False
        # The carried text starts a line; inside a ``` fence; the current line is code.
        self._ls = True
        self._fence = False
        self._code = False
        # The lines of the paragraph being read while it is at most UNIT_MAX characters
        # (None once it is longer: its copies count as they come), its characters, and
        # its held copies.
        self._para: list[str] | None = []
        self._size = 0
        self._held = 0
        # Fingerprints of the last HISTORY segments and paragraphs, oldest first.
        self._ring = ""
        # The copies per block of the window (see _SHIFT), and their sum.
        self._win = array("i", bytes(4 * (window_chars // BLOCK_CHARS)))
        self._wpos = 0
        self._wsum = 0
        #: The most characters written before found in one window so far.
        self.most = 0

    def analyze(self, block: Block) -> Finding | None:
        """Read the block's complete segments; report a window with too many copies."""
        # The text cut after its sentence ends (the space after one becomes a NUL), then
        # into lines.
        text = self._carry + block.text
        if ". " in text:
            text = text.replace(". ", ".\0")
        if "? " in text:
            text = text.replace("? ", "?\0")
        if "! " in text:
            text = text.replace("! ", "!\0")
        if not text.isascii():
            for end in _CJK_ENDS:
                text = text.replace(end, end + "\0")
        lines = text.split("\n")
        to_fp, mask, first = chr, _FP_MASK, _FP  # locals for the loop
        ring = self._ring
        self._ring = ""  # the local is the only reference: ``ring += fp`` grows it in place
        para = self._para
        size = self._size
        held = self._held
        rep = 0
        shown = ""
        ls = self._ls
        skip = self._skip
        last = len(lines) - 1
        carry = ""
        minimum = self._min
        fence = self._fence
        code = self._code
        for li, line in enumerate(lines):
            if ls:  # a line starts: blank, code or text?
                head = line.lstrip()
                if li == last and len(head) < _HEAD and len(line) < 64:
                    carry = line  # too little of it to tell yet
                    break
                if not head:
                    if li < last:  # a blank line ends the paragraph
                        if para is not None:
                            joined = "\n".join(para)
                            data = joined.encode()
                            marks = data.translate(None, _NOT_MARKS)
                            if marks:
                                # Its digits and capitals in order are looked up and kept
                                # like a segment.
                                fp = chr(_FP + (crc32(marks, _SALT) & _FP_MASK))
                                if held and (fp in ring or _prose(data, len(joined))):
                                    rep += held
                                ring += fp
                        para = []
                        size = held = 0
                    continue
                if head.startswith("```"):
                    fence = not fence
                    code = True
                else:
                    code = fence or (line[:1] in (" ", "\t") and not _ITEM.match(line))
            ls = li < last  # the last line goes on in the next block
            if code:
                skip = False
                continue
            pieces = line.split("\0")
            if ls:
                part = line
            else:
                carry = pieces.pop()
                part = line[: len(line) - len(carry)]
            if para is not None:
                size += len(part) + 1
                if size > UNIT_MAX:
                    rep += held  # no enumeration: what it held counts, and what comes
                    para = None
                    held = 0
                else:
                    para.append(part)
            if skip and pieces:  # the end of a segment too long to compare
                skip = False
                del pieces[0]
            for piece in pieces:
                if len(piece) < minimum:  # (the spaces do not count either, below)
                    continue
                norm = piece.lower().replace(" ", "")
                if len(norm) < minimum:
                    continue
                # Look the segment up among the last HISTORY, and remember it.
                fp = to_fp(first + (crc32(norm.encode()) & mask))
                seen = fp in ring
                ring += fp
                if not seen:
                    continue
                shown = piece
                if para is not None and _STATE.search(piece):
                    held += (len(piece) + 1) << _SHIFT | 1
                else:
                    rep += (len(piece) + 1) << _SHIFT | 1
        if len(carry) > MAX_SEGMENT or (skip and not ls):
            skip = True
            carry = carry[-1:] if carry.endswith(_ENDS) else ""
        self._carry = carry
        self._skip = skip
        self._ls = ls
        self._fence = fence
        self._code = code
        # The ring keeps the last HISTORY (a block's lookups also see the ones before
        # them in the block).
        self._ring = ring[-HISTORY:] if len(ring) > HISTORY else ring
        self._para = para
        self._size = size
        self._held = held
        return self._window(rep, shown or block.text)

    def _window(self, rep: int, shown: str) -> Finding | None:
        """Add the block's copies to the window; fire when it holds too many."""
        win = self._win
        pos = self._wpos
        self._wsum += rep - win[pos]
        win[pos] = rep
        pos += 1
        self._wpos = 0 if pos == len(win) else pos
        total = self._wsum >> _SHIFT
        self.most = max(self.most, total)
        if total < self._threshold:
            return None
        chars = BLOCK_CHARS * len(win)
        count = self._wsum & ((1 << _SHIFT) - 1)
        return Finding(
            f"{total} of the last {chars} characters are {count} sentences and lines "
            "written before",
            Evidence(excerpt(shown), 0, count),
        )
