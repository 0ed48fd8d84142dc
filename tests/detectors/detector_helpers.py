"""Shared helpers for the detector tests: feeding text the way the proxy does."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from detectors import Channel, DetectorConfig, Verdict, default_chain
from detectors.tokenize import split_deltas

TRACES = Path(__file__).resolve().parent.parent / "data" / "traces"


def load(name: str) -> list[dict[str, Any]]:
    """Records of ``tests/data/traces/<name>.jsonl``."""
    with (TRACES / f"{name}.jsonl").open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def feed_pieces(
    pieces: Iterable[str], channel: Channel = "thinking", config: DetectorConfig | None = None
) -> Verdict | None:
    """Feed ``pieces`` as deltas of one token each; return the first verdict."""
    chain = default_chain(config or DetectorConfig())
    for i, piece in enumerate(pieces):
        verdict = chain.feed(channel, piece, 1, i * 0.01)
        if verdict is not None:
            return verdict
    return None


def feed_text(text: str, channel: Channel = "thinking", config: DetectorConfig | None = None
              ) -> Verdict | None:
    """Feed ``text`` one pseudo-token at a time."""
    return feed_pieces(split_deltas(text), channel, config)


def key(verdict: Verdict | None) -> tuple[str, str, int] | None:
    """The part of a verdict that must not depend on chunking."""
    if verdict is None:
        return None
    return (verdict.detector, verdict.channel, verdict.at_char)
