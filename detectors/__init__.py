"""Pure incremental runaway detectors for reasoning streams (no I/O, no clock reads)."""

from detectors.base import Channel, Detector, Evidence, Verdict
from detectors.budget import resolve_thinking_budget
from detectors.chain import Chain, default_chain
from detectors.config import DetectorConfig

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
