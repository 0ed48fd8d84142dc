"""Rumination built to the shape of the loops that the shingle and line detectors miss
(issue 38): real sentences, each written again 2 to 5 times in all, in a shifting order,
with new sentences between them, so that a set share of every 4,000-character window at
the tail is sentences written before.

The sentences are real reasoning: those of the healthy Qwen3 traces of tests/data/traces,
cut at sentence ends and line breaks. Nothing here reads a detector: :func:`tail_shares`
measures the shape on its own, sentence by sentence, with a set of the sentences seen.
"""

from __future__ import annotations

import random
import re
from functools import cache

from detector_helpers import load

from detectors.replay import split_stream

#: Sentence ends and line breaks, as the issue describes the measure.
_CUT = re.compile(r"(?<=[.?!])\s+|\n+")
WINDOW = 4000


def _norm(sentence: str) -> str:
    return "".join(sentence.lower().split())


@cache
def sentences() -> tuple[tuple[str, ...], str]:
    """Distinct sentences of 40 to 200 characters that end with ``.``, ``?`` or ``!``, from
    the healthy Qwen3 traces, and the
    first 3,000 characters (or so) of one of them as the text before the loop."""
    seen: set[str] = set()
    found: list[str] = []
    head = ""
    for record in load("healthy"):
        if "qwen3" not in record["model"].lower():
            continue
        start, end, _ = split_stream(record["text"])
        reasoning = record["text"][start:end]
        if not head and len(reasoning) > 6000:
            cut = reasoning.find(". ", 3000)
            head = reasoning[: cut + 2]
            seen.update(_norm(s) for s in _CUT.split(head))
            continue
        for cut in _CUT.split(reasoning):
            s = cut.strip()
            whole = s.endswith((".", "?", "!"))  # joined with a space, it stays one sentence
            if 40 <= len(s) <= 200 and whole and "`" not in s and _norm(s) not in seen:
                seen.add(_norm(s))
                found.append(s)
    return tuple(found), head


def ruminate(seed: int, share: float, loop_chars: int = 12_000) -> tuple[str, int]:
    """Real reasoning, then ``loop_chars`` of rumination where sentences written before make
    up about ``share`` of the text: each recurring sentence is written 2 to 5 times in all,
    never twice within its three last sentences, and new sentences fill the rest (more of
    them recur when the share is high, so that there are copies enough to write). Returns
    the text and where the rumination starts."""
    pool, head = sentences()
    rng = random.Random(seed)
    order = list(pool)
    rng.shuffle(order)
    fresh = iter(order)
    left: dict[str, int] = {}  # recurring sentences already written once: copies to come
    recent: list[str] = []
    parts: list[tuple[str, bool]] = []  # (sentence with its separator, written before)
    written = repeated = 0
    while written < loop_chars:
        # The share over the last WINDOW characters written so far.
        tail = copied = 0
        for text, again in reversed(parts):
            if tail >= WINDOW:
                break
            tail += len(text)
            copied += len(text) if again else 0
        ready = [s for s, n in left.items() if n and s not in recent[-3:]]
        if ready and copied < share * max(tail, 1):
            sentence = rng.choice(ready)
            left[sentence] -= 1
            again = True
        else:
            sentence = next(fresh)
            if rng.random() < max(0.5, share + 0.2):  # to come back 1 to 4 more times
                left[sentence] = rng.randint(1, 4)
            again = False
        sep = "\n\n" if rng.random() < 0.2 else " "
        parts.append((sentence + sep, again))
        recent.append(sentence)
        written += len(sentence) + len(sep)
        repeated += len(sentence) + len(sep) if again else 0
    return head + "".join(text for text, _ in parts), len(head)


def tail_shares(text: str, start: int) -> list[float]:
    """At each sentence end after ``start`` + WINDOW: the share of the last WINDOW
    characters that belongs to sentences (20 characters or more, case and spaces ignored)
    written before in the text."""
    seen: set[str] = set()
    marks: list[tuple[int, int]] = []  # (end, characters written before)
    at = 0
    for match in _CUT.finditer(text + "\n"):
        sentence = text[at : match.start()]
        key = _norm(sentence)
        again = len(key) >= 20 and key in seen
        seen.add(key)
        marks.append((match.end(), match.end() - at if again else 0))
        at = match.end()
    shares = []
    for i, (end, _) in enumerate(marks):
        if end < start + WINDOW:
            continue
        inside = sum(n for e, n in marks[: i + 1] if e > end - WINDOW)
        shares.append(inside / WINDOW)
    return shares
