"""The alerts suite's time-scaled rules are the shipped file with only its ``for:``
durations and range windows changed (``promstack.scaled_rules``)."""

from __future__ import annotations

import re

import pytest

from tests.deploy.promstack import scaled_rules
from tests.deploy.test_deploy import RULES

_ANY_DURATION = re.compile(r"(^\s*for: |\[)\d+[smh](\]|\s*$)", re.MULTILINE)


def test_only_durations_and_windows_change() -> None:
    """Masking every duration leaves the scaled copy equal to the shipped file, byte for
    byte, and every duration in the copy is in seconds."""
    shipped = RULES.read_text()
    scaled = scaled_rules(shipped, 20)
    assert scaled != shipped
    masked = [_ANY_DURATION.sub(r"\1D\2", text) for text in (shipped, scaled)]
    assert masked[0] == masked[1]
    durations = [m.group(0).strip(" []") for m in _ANY_DURATION.finditer(scaled)]
    assert len(durations) == len(_ANY_DURATION.findall(shipped)) > 10
    assert all(d.endswith("s") for d in durations), durations


def test_scaling_divides() -> None:
    """Ten minutes at 1/20 is 30 s; five minutes in a window is 15 s; a duration that does
    not divide into whole seconds is refused, not rounded."""
    text = "      for: 10m\n  expr: rate(x[5m]) > 0\n"
    assert scaled_rules(text, 20) == "      for: 30s\n  expr: rate(x[15s]) > 0\n"
    with pytest.raises(ValueError, match="whole number"):
        scaled_rules("for: 1m\n", 7)
