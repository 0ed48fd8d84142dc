"""Replay recorded traces through :func:`~detectors.default_chain`, as the proxy would.

Pure: records in, results out. A record is a dict with either ``text`` (a raw stream where
``<think>``/``</think>`` tags mark the reasoning) or ``reasoning``/``content``, plus optional
``id``, ``label``, ``lang``, ``confidence`` and ``approx_loop_onset_char_in_text``.

Feeding: the reasoning is fed on the ``thinking`` channel, then the answer on ``content``,
one pseudo-token per delta (:func:`detectors.tokenize.split_deltas`, ``tokens=1``), at
``now = i * seconds_per_token``. The tags themselves are not fed (a server sends them as
channel switches, not text). ``at_char`` is mapped back to an offset in ``text``, tags
included; for ``reasoning``/``content`` records it is the offset in ``reasoning + content``.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from detectors.base import CONTENT, THINKING
from detectors.chain import default_chain
from detectors.config import DetectorConfig
from detectors.tokenize import split_deltas

OPEN_TAG = "<think>"
CLOSE_TAG = "</think>"


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """The outcome of one trace. The first eight fields are the ``--json`` output; the rest
    feed :func:`summarize`."""

    id: str
    label: str | None
    detected: bool
    detector: str | None
    channel: str | None
    at_token: int | None
    at_char: int | None
    chars: int
    lang: str | None = None
    confidence: str | None = None
    onset: int | None = None
    reasoning_start: int = 0
    reasoning_end: int = 0

    def public(self) -> dict[str, Any]:
        """The per-trace object of ``replay --json``."""
        return {
            "id": self.id,
            "label": self.label,
            "detected": self.detected,
            "detector": self.detector,
            "channel": self.channel,
            "at_token": self.at_token,
            "at_char": self.at_char,
            "chars": self.chars,
        }


def split_stream(text: str) -> tuple[int, int, int]:
    """Return ``(reasoning_start, reasoning_end, content_start)`` offsets in ``text``.

    ``<think>`` opens the reasoning (a missing opening tag with a closing one means the
    stream started inside the reasoning, as some chat templates do); ``</think>`` closes it.
    With no tag at all the whole text is content. An unclosed reasoning runs to the end.
    """
    open_at = text.find(OPEN_TAG)
    close_at = text.find(CLOSE_TAG, 0 if open_at < 0 else open_at)
    if open_at < 0 and close_at < 0:
        return 0, 0, 0
    start = 0 if open_at < 0 else open_at + len(OPEN_TAG)
    if close_at < 0:
        return start, len(text), len(text)
    return start, close_at, close_at + len(CLOSE_TAG)


def replay_record(
    record: Mapping[str, Any],
    config: DetectorConfig,
    *,
    fallback_id: str = "",
    seconds_per_token: float = 0.02,
) -> ReplayResult:
    """Feed one record through a fresh default chain; see the module docstring."""
    if isinstance(record.get("text"), str):
        text: str = record["text"]
        r_start, r_end, c_start = split_stream(text)
        reasoning, content = text[r_start:r_end], text[c_start:]
        content_offset = c_start
    else:
        reasoning = str(record.get("reasoning") or "")
        content = str(record.get("content") or "")
        text = reasoning + content
        r_start, r_end, content_offset = 0, len(reasoning), len(reasoning)
    chain = default_chain(config, started_at=0.0)
    verdict = None
    i = 0
    for channel, part in ((THINKING, reasoning), (CONTENT, content)):
        for delta in split_deltas(part):
            i += 1
            verdict = chain.feed(channel, delta, 1, i * seconds_per_token)
            if verdict is not None:
                break
        if verdict is not None:
            break
    at_char = None
    if verdict is not None:
        fed = verdict.at_char
        at_char = r_start + fed if fed <= len(reasoning) else content_offset + fed - len(reasoning)
    onset = record.get("approx_loop_onset_char_in_text")
    rid = record.get("id") or record.get("source") or fallback_id
    return ReplayResult(
        id=str(rid),
        label=None if record.get("label") is None else str(record["label"]),
        detected=verdict is not None,
        detector=None if verdict is None else verdict.detector,
        channel=None if verdict is None else verdict.channel,
        at_token=None if verdict is None else verdict.at_token,
        at_char=at_char,
        chars=len(text),
        lang=None if record.get("lang") is None else str(record["lang"]),
        confidence=None if record.get("confidence") is None else str(record["confidence"]),
        onset=onset if isinstance(onset, int) and not isinstance(onset, bool) else None,
        reasoning_start=r_start,
        reasoning_end=r_end,
    )


def _group(results: list[ReplayResult]) -> dict[str, Any]:
    """Figures for one group of results (see :func:`summarize`)."""
    n = len(results)
    hits = [r for r in results if r.detected]
    out: dict[str, Any] = {"traces": n, "detected": len(hits)}
    loops = [r for r in results if r.label == "loop"]
    if loops:
        caught = [r for r in loops if r.detected]
        out["recall"] = len(caught) / len(loops)
        high = [r for r in loops if r.confidence == "high"]
        if high:
            out["recall_high"] = sum(r.detected for r in high) / len(high)
        delays = [
            r.at_char - r.onset for r in caught if r.onset is not None and r.at_char is not None
        ]
        out["onset_known_detected"] = len(delays)
        out["median_delay_chars"] = statistics.median(delays) if delays else None
        total = sum(r.reasoning_end - r.reasoning_start for r in loops)
        cut = sum(
            max(0, r.reasoning_end - max(r.at_char, r.reasoning_start))
            for r in caught
            if r.at_char is not None and r.channel == THINKING
        )
        out["reasoning_chars"] = total
        out["reasoning_cut_share"] = cut / total if total else None
    negatives = [r for r in results if r.label == "healthy"]
    if negatives:
        out["false_alarms"] = sum(r.detected for r in negatives)
        out["false_alarm_rate"] = out["false_alarms"] / len(negatives)
    return out


def summarize(results: Iterable[ReplayResult]) -> dict[str, Any]:
    """Recall (all loops and ``confidence: high``), false alarms on ``healthy``, median
    detection delay in characters after ``approx_loop_onset_char_in_text`` and the share of
    loop reasoning characters after the detection point; overall, per label and per lang.
    Other labels (e.g. ``ambiguous``) only report how many were detected."""
    items = list(results)
    labels = sorted({r.label or "unlabelled" for r in items})
    langs = sorted({r.lang or "unknown" for r in items})
    return {
        "all": _group(items),
        "by_label": {
            lab: _group([r for r in items if (r.label or "unlabelled") == lab]) for lab in labels
        },
        "by_lang": {
            lang: _group([r for r in items if (r.lang or "unknown") == lang]) for lang in langs
        },
    }
