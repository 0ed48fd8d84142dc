"""No request outlives its configured timeouts when the upstream goes silent and stall
detection is off: the read timeout ends it with a 504 (or an in-stream 504 error). An
upstream error mid-generation is an error status for a non-streaming client."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import orjson
import pytest

from tests.reliability.harness import (
    SSE_CHUNKED_HEAD,
    RawUpstream,
    Reply,
    chunked,
    start_sidecar,
)
from tests.stack import StackFactory

EVENT = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
         b'"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n')
BODY = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]})
READ_TIMEOUT = 0.5
#: One event, then silence (the connection stays open for 30 s).
SILENT_AFTER_ONE = Reply(SSE_CHUNKED_HEAD + chunked(EVENT), stall=30)


async def request(reply: Reply, *, stream: bool, path: str = "/v1/chat/completions",
                  stall: float | None = None) -> tuple[int, bytes, float]:
    upstream = RawUpstream(default=reply)
    await upstream.start()
    sidecar, _ = await start_sidecar(upstream.url, detectors={"stall_seconds": stall},
                                     upstream_read_timeout_seconds=READ_TIMEOUT)
    started = time.monotonic()
    body = orjson.dumps({**orjson.loads(BODY), "stream": stream})
    try:
        async with asyncio.timeout(10), aiohttp.ClientSession() as s, s.post(
                sidecar.make_url(path), data=body) as r:
            status, data = r.status, await r.read()
    finally:
        await sidecar.close()
        await upstream.close()
    return status, data, time.monotonic() - started


@pytest.mark.parametrize("stream", [True, False])
async def test_silent_before_headers_is_504(stream: bool) -> None:
    """An upstream that accepts and never answers gives a 504 after the read timeout."""
    status, data, took = await request(Reply(b"", stall=30), stream=stream)
    assert status == 504
    assert orjson.loads(data)["error"]["type"] == "GatewayTimeoutError"
    assert orjson.loads(data)["error"]["message"] == "no response from upstream within 0.5 s"
    assert took < READ_TIMEOUT + 2


async def test_silent_mid_stream_ends_with_error_event() -> None:
    """A stream that goes silent after a chunk ends with an in-stream 504 and [DONE]."""
    status, data, took = await request(SILENT_AFTER_ONE, stream=True)
    assert status == 200
    assert data.startswith(EVENT)
    error = orjson.loads(data[len(EVENT) + 6 : data.index(b"\n\ndata: [DONE]")])["error"]
    assert error["code"] == 504
    assert error["message"] == "no bytes from upstream for 0.5 s"
    assert data.endswith(b"data: [DONE]\n\n")
    assert READ_TIMEOUT <= took < READ_TIMEOUT + 2


async def test_silent_mid_stream_ends_at_the_read_timeout_with_stall_detection_on() -> None:
    """The stall detector's deadline also carries the read timeout: with a stall limit
    longer than the read timeout, a silent stream still ends at the read timeout, not
    before and not at the stall limit."""
    status, data, took = await request(SILENT_AFTER_ONE, stream=True,
                                       stall=20.0)
    assert status == 200
    error = orjson.loads(data[len(EVENT) + 6 : data.index(b"\n\ndata: [DONE]")])["error"]
    assert error["code"] == 504
    assert READ_TIMEOUT <= took < READ_TIMEOUT + 2


async def test_stream_slower_overall_than_the_read_timeout_completes(
        make_stack: StackFactory) -> None:
    """The read timeout bounds the silence between bytes, not the stream: 12 tokens at
    8 tok/s (1.5 s, a token every 0.125 s) pass a 0.5 s read timeout whole."""
    stack = await make_stack(8.0, upstream_read_timeout_seconds=READ_TIMEOUT,
                             detectors={"stall_seconds": None})
    body = {"model": "sim-healthy", "stream": True, "max_tokens": 12,
            "messages": [{"role": "user", "content": "slow"}]}
    started = time.monotonic()
    async with aiohttp.ClientSession() as s, s.post(stack.url + "/v1/chat/completions",
                                                    json=body) as r:
        data = await r.read()
    assert time.monotonic() - started > 2 * READ_TIMEOUT
    assert b'"error"' not in data
    assert b'"finish_reason":"length"' in data
    assert data.endswith(b"data: [DONE]\n\n")


async def test_silent_mid_stream_nonstreaming_is_504() -> None:
    """A non-streaming client of a stream that goes silent gets a 504."""
    status, data, took = await request(SILENT_AFTER_ONE, stream=False)
    assert status == 504
    assert orjson.loads(data)["error"]["code"] == 504
    assert took < READ_TIMEOUT + 2


async def test_passthrough_silent_is_504() -> None:
    """A pass-through request to a silent upstream gets a 504 after the read timeout."""
    status, data, took = await request(Reply(b"", stall=30), stream=False, path="/tokenize")
    assert status == 504
    assert orjson.loads(data)["error"]["code"] == 504
    assert took < READ_TIMEOUT + 2


async def test_error_event_nonstreaming_is_an_error_status(make_stack: StackFactory) -> None:
    """vLLM's in-stream error reaches a non-streaming client as its 500, as vLLM sends it
    without the sidecar, not as a 200 with an empty completion."""
    stack = await make_stack()
    body = {"model": "sim-healthy", "max_tokens": 50, "messages": [{"role": "user",
                                                                    "content": "x"}]}
    results = []
    for url in (stack.sim_url, stack.url):
        async with aiohttp.ClientSession() as s, s.post(
                url + "/v1/chat/completions", json=body,
                headers={"X-Sim-Fault": "error-mid-stream"}) as r:
            results.append((r.status, orjson.loads(await r.read())["error"]["code"]))
    assert results[1] == results[0] == (500, 500)
