"""The tokens of an ASCII block: a regex here, and the same scan in C beside it.

:func:`ascii_tokens` is what :class:`~detectors.blocks.Blocker` runs on every block of
ASCII text (most blocks): the runs of ``[A-Za-z0-9_]``, every other character that is
not whitespace on its own, and every line break with the spaces and tabs after it (up to
:data:`MAX_INDENT`), in order; other whitespace separates tokens and is dropped. Text
that is not ASCII takes the general pattern in ``blocks.py``.

Two implementations, one contract: this module's regex, and ``blocktokens.c``, which
``setup.py`` builds beside it (Python imports the extension first). Whitespace is
Python's: space, ``\\t``, ``\\n``, ``\\v``, ``\\f``, ``\\r`` and ``\\x1c`` to ``\\x1f``.
``tests/detectors/test_tokenize.py`` compares either with the general pattern on random
ASCII text. The scan in C takes about a quarter of the regex's time on a 256-character
block of prose (2.0 against 7.7 µs).
"""

from __future__ import annotations

import re
from typing import Final

#: Longest indentation kept on a line-break token (more is dropped like other whitespace).
MAX_INDENT: Final = 64
_ASCII_TOKENS: Final = re.compile(rf"[A-Za-z0-9_]+|[^A-Za-z0-9_\s]|\n[ \t]{{0,{MAX_INDENT}}}")


def ascii_tokens(text: str) -> list[str]:
    """The tokens of ``text``, which must be ASCII (see the module docstring)."""
    return _ASCII_TOKENS.findall(text)
