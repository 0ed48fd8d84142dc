"""Detector thresholds, read once when a chain is built.

Every field is a plain ``int | float | bool | None`` so the service's config loader can map
``[detectors] field_name = value`` from TOML onto it by name and type. Each field carries a
one-line ``#:`` comment giving its meaning and unit; docs/detectors.md documents the same defaults.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DetectorConfig:
    """Thresholds of the default chain. Defaults were calibrated on real traces
    (see docs/detectors.md); ``None`` switches a budget off."""

    #: Cut thinking after this many thinking tokens (None = no budget).
    thinking_token_budget: int | None = None
    #: Cut thinking after this many seconds since the request started (None = no budget).
    thinking_seconds_budget: float | None = None
    #: Fire when no token arrived for this many seconds while streaming (None = off).
    stall_seconds: float | None = 60.0

    #: Run the recurrence (near-duplicate segments keep coming back) detector.
    recurrence_enabled: bool = True
    #: Shingle length of the recurrence detector, in pseudo-tokens.
    recurrence_shingle: int = 8
    #: How many recent shingles the recurrence detector remembers (power of two, <= 16384).
    recurrence_history: int = 8192
    #: A shingle counts as recurring when seen at least this many times before (1..3:
    #: the counters stop at 3).
    recurrence_min_seen: int = 2
    #: Sliding window of the recurrence score, in 256-character blocks.
    recurrence_window_blocks: int = 3
    #: Fire when this share of the window's shingles are recurring (0..1; healthy max
    #: seen: 0.69 over 3 blocks).
    recurrence_threshold: float = 0.9
    #: Accumulated evidence: each block adds its share of already-seen shingles minus this
    #: drift (0..1), never going below 0 (a one-sided CUSUM over the whole stream).
    recurrence_drift: float = 0.45
    #: Fire when the accumulated evidence reaches this value (healthy max seen: 1.40).
    recurrence_evidence: float = 2.0
    #: Earlier sightings a shingle on a code line (inside a ``` fence, or indented under a
    #: line ending in ``:``/``{``) needs before it counts as copied, in both rules: 3 lets a
    #: function be quoted, rewritten and re-checked; a fourth copy counts (prose: 1 and 2).
    #: At most 3, as ``recurrence_min_seen``.
    recurrence_code_min_seen: int = 3

    #: Run the exact periodic-tail detector.
    periodic_enabled: bool = True
    #: Fire when the tail repeats verbatim at least this many times ...
    periodic_min_repeats: int = 8
    #: ... and the repeating span covers at least this many characters.
    periodic_min_span: int = 400
    #: Longest period searched, in characters.
    periodic_max_period: int = 1024
    #: Also fire once the second copy of a unit of prose is complete and at least this many
    #: characters repeat the text before them verbatim (0 = off; healthy max seen: 408).
    periodic_copy_chars: int = 600

    #: Run the restatement detector (one line, or one whole list, written again and again).
    restatement_enabled: bool = True
    #: Fire when one statement has been written this many times ...
    restatement_copies: int = 8
    #: ... within this many characters of the channel (healthy max seen: 5 in 16,384).
    restatement_window_chars: int = 16384

    #: Run the sentences detector (much of the recent thinking is sentences and lines
    #: written before, in any order).
    sentences_enabled: bool = True
    #: Fire when segments (sentences and lines) already written make up this many
    #: characters of the window (healthy max seen: 808, by Claude 3.7) ...
    sentences_repeat_chars: int = 1200
    #: ... of this many characters (a multiple of 256).
    sentences_window_chars: int = 4096
    #: A segment counts when it holds this many characters besides spaces.
    sentences_min_chars: int = 20

    #: Run the degeneration (word salad, symbol runs) detector.
    degeneration_enabled: bool = True
    #: Fire on a run of this many word tokens with no punctuation or line break.
    salad_run_tokens: int = 480
    #: Fire on a run of this many changes of symbol (no letters or digits) with no word between.
    symbol_run_tokens: int = 80
    #: Fire when this many writing systems (Latin, CJK, Hangul, Cyrillic, Arabic, Hebrew,
    #: Indic/Thai) each bring at least ``script_min_tokens`` words within 2,048 characters.
    script_mix: int = 4
    #: Words a writing system needs in the window to count for ``script_mix``.
    script_min_tokens: int = 8

    #: Also run the text detectors on the ``content`` channel.
    content_enabled: bool = True
