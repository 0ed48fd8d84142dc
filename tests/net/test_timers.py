"""A watched stream arms no timer per chunk: its read timeout and the stall detector share
one deadline, pushed back at most once a second while bytes arrive."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from tests.stack import StackFactory


async def test_watched_stream_arms_no_timer_per_chunk(make_stack: StackFactory) -> None:
    """300 chunks through the sidecar, unpaced, schedule a handful of timers on the event
    loop, not one per chunk (aiohttp's sock_read timeout re-arms one on every read)."""
    stack = await make_stack(0.0)
    loop = asyncio.get_running_loop()
    armed = [0]
    call_at = loop.call_at

    def counting_call_at(when: float, callback: Any, *args: Any, **kw: Any) -> Any:
        armed[0] += 1
        return call_at(when, callback, *args, **kw)

    body = {"model": "sim-healthy", "stream": True, "max_tokens": 300,
            "messages": [{"role": "user", "content": "timers"}]}
    async with aiohttp.ClientSession() as s:
        # One request first, so connection set-up is not counted.
        async with s.post(stack.url + "/v1/chat/completions", json=body) as r:
            await r.read()
        loop.call_at = counting_call_at  # type: ignore[method-assign]
        try:
            async with s.post(stack.url + "/v1/chat/completions", json=body) as r:
                data = await r.read()
        finally:
            del loop.call_at
    chunks = data.count(b"\n\ndata: ")
    assert chunks >= 200, chunks
    assert armed[0] < 40, armed[0]
