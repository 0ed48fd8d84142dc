"""Fixtures for proxy tests: a real simulated node and a real sidecar on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from tests.stack import Stack, start_stack, stop_stack

StackFactory = Callable[..., Awaitable[Stack]]


@pytest.fixture
async def make_stack() -> AsyncIterator[StackFactory]:
    """Factory: ``await make_stack(tokens_per_second=..., mode=..., detectors={...})``."""
    stacks: list[Stack] = []

    async def start(tokens_per_second: float = 0.0, **config: Any) -> Stack:
        stack = await start_stack(tokens_per_second, **config)
        stacks.append(stack)
        return stack

    yield start
    for stack in stacks:
        await stop_stack(stack)
