"""A client that leaves once it has its response's end is no disconnect.

Codex closes its connection as soon as ``response.completed`` arrives, before the upstream
has ended the body: the sidecar must count such an exchange as it ended (``ok``,
``reissued``, ...), not as ``client_disconnect``. A fake upstream here sends a real vLLM
Responses stream and then holds the body open until the test releases it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.stack import Stack, sample_sum, start_stack, stop_stack

CAPTURE = (Path(__file__).parents[1] / "data" / "captures" / "vllm-0.32.0-agent-apis-recorded"
           / "responses_healthy.sse")
BODY = {"model": "tiny-healthy", "input": "Why?", "max_output_tokens": 1000, "stream": True}


class HeldUpstream:
    """Answers ``POST /v1/responses`` with the captured stream's first ``split`` bytes,
    holds until ``release`` is set (the test's end), then sends the rest and ends."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.split = len(CAPTURE.read_bytes())
        self.server = TestServer(self._app(), host="127.0.0.1")

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/responses", self._responses)
        return app

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await resp.prepare(request)
        capture = CAPTURE.read_bytes()
        await resp.write(capture[: self.split])
        await self.release.wait()
        await resp.write(capture[self.split :])
        await resp.write_eof()
        return resp

    @property
    def url(self) -> str:
        return str(self.server.make_url("")).rstrip("/")


@pytest.fixture
async def held() -> AsyncIterator[tuple[HeldUpstream, Stack]]:
    """The held upstream and a sidecar in front of it."""
    upstream = HeldUpstream()
    await upstream.server.start_server()
    stack = await start_stack(upstream=upstream.url)
    yield upstream, stack
    upstream.release.set()
    await stop_stack(stack)
    await upstream.server.close()


async def _read_until(url: str, marker: bytes) -> bytes:
    """Stream a Responses request and leave (close the connection) once ``marker`` came."""
    got = b""
    async with aiohttp.ClientSession() as session, session.post(
            url + "/v1/responses", json=BODY) as resp:
        async for chunk in resp.content.iter_any():
            got += chunk
            if marker in got:
                resp.close()
                break
    return got


async def _counted(stack: Stack) -> dict[str, float]:
    """The sidecar's responses requests by outcome, once the exchange was counted."""
    outcomes = ("ok", "client_disconnect")
    for _ in range(500):
        text = stack.sidecar_metrics_text()
        counts = {o: sample_sum(text, "runaway_sidecar_requests_total", route="responses",
                                outcome=o) for o in outcomes}
        if sum(counts.values()):
            return counts
        await asyncio.sleep(0.01)
    raise AssertionError("the exchange was never counted")


async def test_leaving_after_the_end_counts_as_ended(held: tuple[HeldUpstream, Stack]) -> None:
    """Closing after response.completed, with the upstream body still open: outcome ok."""
    _, stack = held
    got = await _read_until(stack.url, b"event: response.completed")
    assert got.endswith(CAPTURE.read_bytes()[-200:])
    assert await _counted(stack) == {"ok": 1, "client_disconnect": 0}
    assert stack.metric("runaway_sidecar_client_disconnects_total", route="responses") == 0


async def test_leaving_before_the_end_is_a_disconnect(held: tuple[HeldUpstream, Stack]) -> None:
    """Closing mid-stream, before the end was written, is still a client disconnect."""
    upstream, stack = held
    capture = CAPTURE.read_bytes()
    upstream.split = capture.index(b"event: response.reasoning_text.delta")
    upstream.split = capture.index(b"\n\n", upstream.split) + 2  # one whole delta event
    got = await _read_until(stack.url, b"event: response.reasoning_text.delta")
    assert got == capture[: upstream.split]
    assert await _counted(stack) == {"ok": 0, "client_disconnect": 1}
    assert stack.metric("runaway_sidecar_client_disconnects_total", route="responses") == 1
