"""Shared fixtures: paths to recorded data, and a simulated node with a sidecar in front."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.stack import Stack, StackFactory, start_stack, stop_stack

DATA = Path(__file__).parent / "data"
CAPTURES = DATA / "captures" / "vllm-0.32.0"


@pytest.fixture
def captures() -> Path:
    """The directory of bytes captured from a real vLLM 0.32.0 server."""
    return CAPTURES


@pytest.fixture
async def make_stack() -> AsyncIterator[StackFactory]:
    """Factory: ``await make_stack(tokens_per_second=..., mode=..., detectors={...})``: a
    real simulated node and a real sidecar on loopback, stopped after the test."""
    stacks: list[Stack] = []

    async def start(tokens_per_second: float = 0.0, **config: Any) -> Stack:
        stack = await start_stack(tokens_per_second, **config)
        stacks.append(stack)
        return stack

    yield start
    for stack in stacks:
        await stop_stack(stack)
