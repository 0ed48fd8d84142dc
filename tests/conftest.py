"""Shared fixtures: paths to recorded data."""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
CAPTURES = DATA / "captures" / "vllm-0.32.0"


@pytest.fixture
def captures() -> Path:
    """The directory of bytes captured from a real vLLM 0.32.0 server."""
    return CAPTURES
