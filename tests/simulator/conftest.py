"""Fixtures for the simulator's tests: a simulated node on a real loopback port."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient

from sidecar.simulator import SimulatorConfig, make_simulator_app

SimFactory = Callable[..., Awaitable[TestClient[Any, Any]]]

_NORMALIZE = (
    (re.compile(rb'"id":"[^"]*"'), b'"id":"<id>"'),
    (re.compile(rb'"created":\d+'), b'"created":0'),
    (re.compile(rb'"model":"[^"]*"'), b'"model":"<model>"'),
    (re.compile(rb'"system_fingerprint":"[^"]*"'), b'"system_fingerprint":"<fp>"'),
)


def normalize(data: bytes) -> bytes:
    """Blank out only the values that differ between runs: id, created, model, fingerprint."""
    for pattern, replacement in _NORMALIZE:
        data = pattern.sub(replacement, data)
    return data


@pytest.fixture
def sim(aiohttp_client: Any) -> SimFactory:
    """Start a simulated node (as fast as possible unless told) and return its client."""

    async def start(**overrides: Any) -> TestClient[Any, Any]:
        settings: dict[str, Any] = {"tokens_per_second": 0.0, "served_model_name": "tiny-qwen"}
        settings.update(overrides)
        client: TestClient[Any, Any] = await aiohttp_client(
            make_simulator_app(SimulatorConfig(**settings))
        )
        return client

    return start


def hello(**extra: Any) -> dict[str, Any]:
    """The chat body behind the captures: one user turn saying Hello."""
    body: dict[str, Any] = {
        "model": "tiny-qwen",
        "messages": [{"role": "user", "content": "Hello"}],
    }
    body.update(extra)
    return body


def events(data: bytes) -> list[bytes]:
    """Split an SSE body into event payloads (without ``data: ``)."""
    parts = data.split(b"\n\n")
    assert parts[-1] == b"", "an SSE body ends with a blank line"
    assert all(p.startswith(b"data: ") for p in parts[:-1])
    return [p[len(b"data: ") :] for p in parts[:-1]]


def metric(text: str, name: str, **labels: str) -> float:
    """Sum the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        if head != name and not head.startswith(name + "{"):
            continue
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total


def named_events(data: bytes) -> list[tuple[str, dict[str, object]]]:
    """Split a body of named events into ``(name, payload)`` pairs."""
    out = []
    for block in data.split(b"\n\n")[:-1]:
        name, payload = block.split(b"\n")
        out.append((name.removeprefix(b"event: ").decode(),
                    orjson.loads(payload.removeprefix(b"data: "))))
    return out


class CountingDraw:
    """A fake source of randomness: every draw is a counter, so ids are predictable."""

    def __init__(self) -> None:
        self.n = 0

    def hex(self, digits: int) -> str:
        self.n += 1
        return f"{self.n:0{digits}x}"

    def alnum(self, length: int) -> str:
        self.n += 1
        return f"{self.n:0{length}d}"

    def number(self, below: int) -> int:
        self.n += 1
        return self.n % below
