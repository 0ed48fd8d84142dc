"""Degeneration: word salad, symbol runs and script soup.

Degenerate streams stop writing sentences. Three signals are counted over the detection
tokens (see :mod:`detectors.blocks`):

- a *salad run*: word tokens (a word, a number or one CJK character) with no punctuation
  mark and no line break between them. English prose puts a comma, period or break every
  few dozen words and CJK prose a 、 or 。 every few dozen characters; salad streams write
  hundreds of words in one breath ("renewal rebirth cycles continuity ...",
  "內容行銷搜索引擎優化...").
- a *symbol run*: punctuation, symbols or emoji with no word between them
  ("👇👇👇↓↓↓⬇⬇⬇🔻🔻"). Only changes of symbol count, so a markdown rule (``|-----|``)
  or a row of ``=`` is short however long it is drawn. Line breaks do not end the run.
- *script soup*: words from many writing systems at once (Latin, CJK, Hangul, Cyrillic,
  Arabic ...) within 8 blocks. Japanese or Chinese reasoning mixes two (CJK and Latin);
  collapsing streams hop between four or more.

Runs carry across blocks, so they do not depend on where a block ends. Memory: a few
counters and an 8-block window of per-script counts (one flat array, 0.3 KiB; eight
lists of seven counts took 0.9).
"""

from __future__ import annotations

from array import array

from detectors.analyzer import Finding, excerpt
from detectors.base import Evidence
from detectors.blocks import Block

_SCRIPT_WINDOW = 8
_LATIN, _CJK, _HANGUL, _CYRILLIC, _ARABIC, _HEBREW, _INDIC = range(7)
_NAMES = ("Latin", "CJK", "Hangul", "Cyrillic", "Arabic", "Hebrew", "Indic/Thai")


def _script(ch: str) -> int:
    """Writing system of a non-ASCII word's first character, or -1 (Greek, symbols)."""
    o = ord(ch)
    if o < 0x250:
        return _LATIN
    if 0x3040 <= o < 0xA000 or 0xF900 <= o < 0xFB00:
        return _CJK
    if 0xAC00 <= o < 0xD7B0 or 0x1100 <= o < 0x1200 or 0x3130 <= o < 0x3190:
        return _HANGUL
    if 0x400 <= o < 0x530:
        return _CYRILLIC
    if 0x600 <= o < 0x700:
        return _ARABIC
    if 0x590 <= o < 0x600:
        return _HEBREW
    if 0x900 <= o < 0xE80:
        return _INDIC
    return -1


class DegenerationAnalyzer:
    """Block analyzer for one channel; see the module docstring."""

    __slots__ = (
        "_last_symbol",
        "_min_script",
        "_mix",
        "_other",
        "_salad",
        "_salad_max",
        "_scripts",
        "_symbol",
        "_symbol_max",
        "_totals",
    )

    def __init__(
        self, salad_run_tokens: int, symbol_run_tokens: int, script_mix: int, script_min: int
    ) -> None:
        self._salad_max = salad_run_tokens
        self._symbol_max = symbol_run_tokens
        self._mix = script_mix
        self._min_script = script_min
        self._salad = 0
        self._symbol = 0
        self._last_symbol = ""
        # The window's counts, ``len(_NAMES)`` per block, oldest block first.
        self._scripts = array("I")
        self._totals = [0] * len(_NAMES)
        # Words of other writing systems than Latin in the window (most windows: none).
        self._other = 0

    def analyze(self, block: Block) -> Finding | None:
        """Update the runs and the script window with the block; report the first signal."""
        salad = self._salad
        symbol = self._symbol
        last_symbol = self._last_symbol
        salad_max = self._salad_max
        symbol_max = self._symbol_max
        counts = [0] * len(_NAMES)
        latin = 0  # most words: a local count, added to ``counts`` after the loop
        other = 0  # words of other writing systems than Latin
        fired = ""
        for tok in block.toks:
            c0 = tok[0]
            if c0.isalnum() or c0 == "_":
                salad += 1
                symbol = 0
                if c0.isascii():
                    latin += 1
                else:
                    s = _script(c0)
                    if s >= 0:
                        counts[s] += 1
                        other += s > 0
                if salad >= salad_max:
                    fired = "salad"
                    break
            elif c0 == "\n":  # a line break (with the next line's indentation)
                salad = 0
            else:
                salad = 0
                if tok != last_symbol:
                    last_symbol = tok
                    symbol += 1
                    if symbol >= symbol_max:
                        fired = "symbol"
                        break
        counts[_LATIN] += latin
        self._salad = salad
        self._symbol = symbol
        self._last_symbol = last_symbol
        if fired == "salad":
            return Finding(
                f"{salad} words with no punctuation or line break (word salad)",
                Evidence(excerpt(block.text), 0, salad),
            )
        if fired == "symbol":
            return Finding(
                f"{symbol} different symbols in a row with no word between them",
                Evidence(excerpt(block.text), 0, symbol),
            )
        return self._script_soup(counts, other, block)

    def _script_soup(self, counts: list[int], other: int, block: Block) -> Finding | None:
        totals = self._totals
        window = self._scripts
        window.extend(counts)
        width = len(_NAMES)
        if not (other or self._other) and self._mix > 1:
            # Latin alone in the window (most blocks): only its count moves, and one
            # writing system is no mix.
            totals[0] += counts[0]
            if len(window) > _SCRIPT_WINDOW * width:
                totals[0] -= window[0]
                del window[:width]
            return None
        for i, c in enumerate(counts):
            totals[i] += c
        if len(window) > _SCRIPT_WINDOW * width:
            for i in range(width):
                totals[i] -= window[i]
            del window[:width]
        self._other = sum(totals) - totals[0]
        present = [_NAMES[i] for i, c in enumerate(totals) if c >= self._min_script]
        if len(present) < self._mix:
            return None
        return Finding(
            f"words from {len(present)} writing systems at once ({', '.join(present)})",
            Evidence(excerpt(block.text), 0, len(present)),
        )
