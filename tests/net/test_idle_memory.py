"""An idle stream holds its state, not its last read, and its request once.

While the upstream is silent the proxy waits in its next read. What it read last, and the
bytes that read became for the client, must not stay bound meanwhile: a burst read in one
go (vLLM flushing many tokens at once) would otherwise stay in memory for as long as the
stream stays idle, once per idle stream.

The request is kept for a reissue for as long as the stream is open. A coding agent's
prompt is tens of kilobytes, so it is kept as the bytes the client sent (plus the body
sent upstream when that differs), never also as a parsed copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import tracemalloc
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

import sidecar
from tests.reliability.harness import (
    SSE_CHUNKED_HEAD,
    RawUpstream,
    Reply,
    chunked,
    start_sidecar,
)

EVENTS = 400
#: A streaming chat request with a one-character prompt.
SHORT_REQUEST = orjson.dumps({"model": "m", "stream": True,
                              "messages": [{"role": "user", "content": "x"}]})


def _event(i: int) -> bytes:
    # Each text is longer than the short texts the template reader keeps in a table
    # shared by every stream (``sidecar.apis.templates``): that table grows with the
    # distinct tokens the whole process has seen (up to its bound), so with the tests run
    # before this one in the same process it may grow past the threshold here.
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": {"content": f" word {i:04d} of the burst"},
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
    tracemalloc.start()
    try:
        async with aiohttp.ClientSession() as s, asyncio.timeout(10), s.post(
                sidecar.make_url("/v1/chat/completions"), data=SHORT_REQUEST) as r:
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


PROMPT = 300_000


def _big_request(stream: bool) -> bytes:
    """A chat request with a ``PROMPT``-byte user message, built as bytes: the test itself
    holds no str of the prompt."""
    return (b'{"model":"m","stream":' + (b"true" if stream else b"false") +
            b',"messages":[{"role":"user","content":"fix this: ' + b"x = 1; " * (PROMPT // 7) +
            b'"}]}')


def _held_by_sidecar() -> list[int]:
    """Sizes of the live blocks of half the prompt or more that the sidecar's own code
    allocated (tracemalloc must be tracing)."""
    ours = str(Path(sidecar.__file__).parent)
    snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, ours + "/*")])
    return [t.size for t in snapshot.traces if t.size >= PROMPT // 2]


async def _held_while_open(upstream: RawUpstream, body: bytes, *, requests: int,
                           read_events: int, detectors: dict[str, Any]) -> list[int]:
    """Post ``body`` through a sidecar in front of ``upstream`` (with ``detectors``),
    read ``read_events`` events of its answer, wait until the upstream has had
    ``requests`` requests and the sidecar a moment to read what they were answered, and
    return :func:`_held_by_sidecar` while the request is still open."""
    await upstream.start()
    sidecar_server, _ = await start_sidecar(upstream.url, detectors=detectors)
    tracemalloc.start()
    try:
        async with aiohttp.ClientSession() as s, asyncio.timeout(10):
            post = asyncio.ensure_future(s.post(
                sidecar_server.make_url("/v1/chat/completions"), data=body))
            if read_events:
                r = await post
                seen = 0
                while seen < read_events:
                    piece = await r.content.readany()
                    assert piece
                    seen += piece.count(b"\n\n")
            # A non-streaming client has nothing to read until the end: wait until the
            # upstream has the requests and the sidecar has read what they got.
            while len(upstream.requests) < requests:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)
            held = _held_by_sidecar()
            # End the client's request inside its session, so aiohttp releases the
            # connection now rather than warning of it when the collector finds it later.
            post.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                (await post).close()
    finally:
        tracemalloc.stop()
        await sidecar_server.close()
        await upstream.close()
    return held


@pytest.mark.parametrize(("stream", "copies"), [(True, 1), (False, 2)])
async def test_an_open_stream_keeps_its_request_as_bytes(stream: bool, copies: int) -> None:
    """A 300 KB prompt, a few events, then a silent upstream. While the stream is open the
    sidecar's own code holds the request once for a streaming client (the bytes it read,
    which are also what it sent upstream) and twice for a non-streaming one (those bytes
    and the streaming body it sent instead), each a single block: no parsed copy of the
    prompt (before, the parsed body was kept as well, and the non-streaming body twice)."""
    events = b"".join(_event(i) for i in range(3))
    upstream = RawUpstream(default=Reply(SSE_CHUNKED_HEAD + chunked(events), stall=30))
    body = _big_request(stream)
    held = await _held_while_open(upstream, body, requests=1, read_events=3 if stream else 0,
                                  detectors={"stall_seconds": None})
    assert len(body) > PROMPT
    assert len(held) == copies, held


def _reasoning_event(i: int) -> bytes:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": {"reasoning": f" step{i}"},
                          "finish_reason": None}]}
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


@pytest.mark.parametrize("stream", [True, False])
async def test_a_reissue_keeps_the_request_and_its_own_body(stream: bool) -> None:
    """The same prompt; the thinking budget (2 tokens) cuts the first attempt, and the
    reissue's upstream answers one token and goes silent. While the reissue is open the
    sidecar holds two blocks of the prompt's size, streaming client or not: the client's
    bytes and the reissue's body (not the parsed body, nor the first attempt's body)."""
    thinking = b"".join(_reasoning_event(i) for i in range(6))
    upstream = RawUpstream(queue=[
        Reply(SSE_CHUNKED_HEAD + chunked(thinking), stall=30),
        Reply(SSE_CHUNKED_HEAD + chunked(_event(0)), stall=30),
    ])
    held = await _held_while_open(upstream, _big_request(stream), requests=2, read_events=0,
                                  detectors={"stall_seconds": None, "thinking_token_budget": 2})
    assert len(held) == 2, held


async def test_an_idle_stream_does_not_hold_its_last_chunk_parsed() -> None:
    """One event whose chunk carries 300 KB in a field the proxy does not read, then a
    silent upstream: while the stream waits, the sidecar's code holds no block of half
    that size. Before, the last chunk parsed stayed bound to the stream's model, with the
    field's string, and the chunk's shape was learned as a template holding its bytes
    (templates now take chunks with at most 1 KiB besides their text)."""
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "system_fingerprint": "f" * PROMPT,
             "choices": [{"index": 0, "delta": {"content": " word"}, "finish_reason": None}]}
    upstream = RawUpstream(default=Reply(
        SSE_CHUNKED_HEAD + chunked(b"data: " + orjson.dumps(chunk) + b"\n\n"), stall=30))
    held = await _held_while_open(upstream, SHORT_REQUEST, requests=1, read_events=1,
                                  detectors={"stall_seconds": None})
    assert held == []
