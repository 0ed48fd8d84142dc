"""Pure incremental runaway detectors for reasoning streams (no I/O, no clock reads)."""

from detectors.native import select

select()  # before the compiled modules: they may have to run from their source

from detectors.base import Channel, Detector, Evidence, Verdict  # noqa: E402
from detectors.budget import resolve_thinking_budget  # noqa: E402
from detectors.chain import Chain, default_chain  # noqa: E402
from detectors.config import DetectorConfig  # noqa: E402

__all__ = [
    "Chain",
    "Channel",
    "Detector",
    "DetectorConfig",
    "Evidence",
    "Verdict",
    "default_chain",
    "resolve_thinking_budget",
]
