"""Helpers for the coding-agent API tests: raw SSE events through a stack, and the
simulator's counters."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson

from tests.stack import Stack

PROMPT = "Fix the IndexError in parse_rows()."
ANSWER = "Fix: guard empty lists before indexing!"


def sse_events(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data object) of each named event; comments are left out."""
    out = []
    for block in data.split(b"\n\n"):
        name, payload = None, None
        for line in block.split(b"\n"):
            if line.startswith(b"event: "):
                name = line[7:].decode()
            elif line.startswith(b"data: "):
                payload = orjson.loads(line[6:])
        if name is not None and payload is not None:
            out.append((name, payload))
    return out


def comments(data: bytes) -> list[bytes]:
    """The SSE comment lines of a stream (the sidecar's ``: runaway ...`` markers)."""
    return [line for line in data.split(b"\n") if line.startswith(b":")]


async def post(url: str, body: dict[str, Any], headers: dict[str, str] | None = None,
               ) -> tuple[int, dict[str, str], bytes]:
    """POST ``body`` as JSON; status, headers and the whole body."""
    async with aiohttp.ClientSession() as s, s.post(url, json=body,
                                                    headers=headers or {}) as r:
        return r.status, dict(r.headers), await r.read()


async def idle(stack: Stack) -> bool:
    """The simulated node runs no request."""
    return await stack.sim_metric("vllm:num_requests_running") == 0
