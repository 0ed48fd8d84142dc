"""An idle stream holds its state, not its last read.

While the upstream is silent the proxy waits in its next read. What it read last, and the
bytes that read became for the client, must not stay bound meanwhile: a burst read in one
go (vLLM flushing many tokens at once) would otherwise stay in memory for as long as the
stream stays idle, once per idle stream.
"""

from __future__ import annotations

import asyncio
import tracemalloc

import aiohttp
import orjson

from tests.reliability.harness import (
    SSE_CHUNKED_HEAD,
    RawUpstream,
    Reply,
    chunked,
    start_sidecar,
)

EVENTS = 400


def _event(i: int) -> bytes:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": {"content": f" word{i}"},
                          "finish_reason": None}]}
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


async def test_an_idle_stream_does_not_hold_its_last_read() -> None:
    """400 events (about 60 KB) arrive in one read, then the upstream is silent. While the
    stream is idle, no block of half the burst's size or more is alive in the process:
    before the fix the read and its output (two such blocks) stayed bound in the read
    loop while it waited for the next read."""
    burst = b"".join(_event(i) for i in range(EVENTS))
    upstream = RawUpstream(default=Reply(SSE_CHUNKED_HEAD + chunked(burst), stall=30))
    await upstream.start()
    # No text detectors (their tables are not what this measures), no stall verdict.
    sidecar, _ = await start_sidecar(upstream.url, detectors={
        "stall_seconds": None, "recurrence_enabled": False, "periodic_enabled": False,
        "degeneration_enabled": False})
    body = orjson.dumps({"model": "m", "stream": True,
                         "messages": [{"role": "user", "content": "x"}]})
    tracemalloc.start()
    try:
        async with aiohttp.ClientSession() as s, asyncio.timeout(10), s.post(
                sidecar.make_url("/v1/chat/completions"), data=body) as r:
            seen = 0
            while seen < EVENTS:
                piece = await r.content.readany()
                assert piece
                seen += piece.count(b"\n\n")
            del piece
            await asyncio.sleep(0.2)
            big = [t.size for t in tracemalloc.take_snapshot().traces
                   if t.size >= len(burst) // 2]
    finally:
        tracemalloc.stop()
        await sidecar.close()
        await upstream.close()
    assert len(burst) > 50_000
    assert big == []
