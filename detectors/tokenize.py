"""The pseudo-tokenizer used by replay, the benchmark and the text detectors.

Traces carry no token ids, so text is split into pseudo-tokens that behave like a real
BPE stream closely enough for detection and for counting:

- a run of letters, digits or underscores (``\\w`` minus CJK) is one token;
- every CJK ideograph, kana, Hangul syllable or full-width form is one token on its own
  (those scripts are written without spaces; one character is about one real token);
- every other non-space character (punctuation, symbols, emoji) is one token;
- whitespace belongs to the token that follows it (as in BPE, where `` Hmm`` is one token),
  so the pieces from :func:`split_deltas` concatenate back to the input exactly.
"""

from __future__ import annotations

import re

# Ranges of scripts written without spaces: CJK symbols/punctuation, kana, CJK ideographs
# (+ extension A, compatibility), Hangul syllables and jamo, half/full-width forms.
CJK_RANGES = (
    "\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    "\u1100-\u11ff\u3130-\u318f\uac00-\ud7af\uff00-\uffef"
)

#: One pseudo-token, without the whitespace in front of it.
TOKEN_RE = re.compile(rf"[{CJK_RANGES}]|[^\W{CJK_RANGES}]+|[^\w\s{CJK_RANGES}]")
_DELTA_RE = re.compile(rf"\s*(?:[{CJK_RANGES}]|[^\W{CJK_RANGES}]+|[^\w\s{CJK_RANGES}])|\s+")


def tokens(text: str) -> list[str]:
    """The pseudo-tokens of ``text`` with whitespace dropped."""
    return TOKEN_RE.findall(text)


def split_deltas(text: str) -> list[str]:
    """Split ``text`` into the deltas a streaming server would send, one pseudo-token each
    (leading whitespace attached). ``"".join(split_deltas(t)) == t`` always holds."""
    return _DELTA_RE.findall(text)
