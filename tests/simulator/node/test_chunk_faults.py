"""Each injected fault (X-Sim-Fault) gives the client exactly the failure it names, on
the chunk routes (chat, completions)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestClient

from tests.simulator.conftest import SimFactory, events, hello, metric

CHAT = "/v1/chat/completions"
ERROR_EVENT = (
    b'{"error":{"message":"Internal server error","type":"InternalServerError",'
    b'"param":null,"code":500}}'
)


def _stream_body(**extra: Any) -> dict[str, Any]:
    return hello(model="sim-loop", stream=True, max_tokens=40, **extra)


async def _token_events(resp: aiohttp.ClientResponse, count: int) -> list[bytes]:
    """Read ``count`` SSE events that carry a token (skipping the role chunk)."""
    got: list[bytes] = []
    while len(got) < count:
        line = await asyncio.wait_for(resp.content.readline(), 2.0)
        if line.startswith(b"data: ") and b'"reasoning"' in line:
            got.append(line)
    return got


async def _read_until_error(resp: aiohttp.ClientResponse) -> tuple[bytes, BaseException | None]:
    """Read a body until it ends or breaks; return what arrived and the error, if any."""
    received = b""
    try:
        async for chunk in resp.content.iter_any():
            received += chunk
    except aiohttp.ClientPayloadError as exc:
        return received, exc
    return received, None


def _fault(name: str, **extra: str) -> dict[str, str]:
    headers = {"X-Sim-Fault": name}
    headers.update({f"X-Sim-Fault-{k.title()}": v for k, v in extra.items()})
    return headers


async def test_reset_before_headers(sim: SimFactory) -> None:
    """The socket closes with no status line at all."""
    client = await sim()
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await client.post(CHAT, json=_stream_body(), headers=_fault("reset-before-headers"))


async def test_reset_mid_stream_after_n_tokens(sim: SimFactory) -> None:
    """After X-Sim-Fault-After token chunks the transport is aborted mid-body."""
    client = await sim()
    resp = await client.post(
        CHAT,
        json=_stream_body(),
        headers=_fault("reset-mid-stream", after="3"),
    )
    assert resp.status == 200
    received, error = await _read_until_error(resp)
    assert isinstance(error, aiohttp.ClientPayloadError)
    assert received.count(b'"reasoning"') == 3
    assert b"[DONE]" not in received
    text = await (await client.get("/metrics")).text()
    assert metric(text, "vllm:num_requests_running") == 0
    assert metric(text, "vllm:request_success_total") == 0


async def test_reset_mid_stream_default_is_five(sim: SimFactory) -> None:
    """Without X-Sim-Fault-After the cut comes after 5 token chunks."""
    client = await sim()
    resp = await client.post(CHAT, json=_stream_body(), headers={"X-Sim-Fault": "reset-mid-stream"})
    received, error = await _read_until_error(resp)
    assert isinstance(error, aiohttp.ClientPayloadError)
    assert received.count(b'"reasoning"') == 5


async def test_stall_mid_stream_keeps_socket_open(sim: SimFactory) -> None:
    """After N token chunks nothing more arrives, but the connection stays open."""
    client = await sim()
    resp = await client.post(
        CHAT,
        json=_stream_body(),
        headers=_fault("stall-mid-stream", after="2"),
    )
    assert len(await _token_events(resp, 2)) == 2
    await resp.content.readline()  # the blank line that ends the second event
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(resp.content.readline(), 0.4)
    assert resp.connection is not None
    text = await (await client.get("/metrics")).text()
    assert metric(text, "vllm:num_requests_running") == 1
    resp.close()


async def test_http_500_body(sim: SimFactory) -> None:
    """A vLLM-style 500 JSON error body, before any stream."""
    client = await sim()
    resp = await client.post(CHAT, json=_stream_body(), headers={"X-Sim-Fault": "http-500"})
    assert resp.status == 500
    assert resp.headers["content-type"] == "application/json"
    assert await resp.read() == ERROR_EVENT


async def test_invalid_sse(sim: SimFactory) -> None:
    """200 with SSE headers, then bytes that parse neither as SSE events nor as JSON."""
    client = await sim()
    resp = await client.post(CHAT, json=_stream_body(), headers={"X-Sim-Fault": "invalid-sse"})
    assert resp.status == 200
    assert resp.headers["content-type"] == "text/event-stream; charset=utf-8"
    body = await resp.read()
    assert b"[DONE]" not in body
    payloads = [p[6:] for p in body.split(b"\n\n") if p.startswith(b"data: ")]
    assert payloads
    for payload in payloads:
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(payload)
    with pytest.raises(UnicodeDecodeError):
        body.decode("utf-8")


async def test_no_done_runs_to_the_end_without_done(sim: SimFactory) -> None:
    """The whole stream, finish and usage included, but no data: [DONE]."""
    client = await sim()
    resp = await client.post(
        CHAT,
        json=_stream_body(stream_options={"include_usage": True}),
        headers={"X-Sim-Fault": "no-done"},
    )
    payloads = events(await resp.read())
    assert b"[DONE]" not in payloads
    assert b'"finish_reason":"length"' in payloads[-2]
    assert b'"choices":[]' in payloads[-1]


async def test_no_done_with_after_cuts_cleanly(sim: SimFactory) -> None:
    """With X-Sim-Fault-After the stream ends cleanly after N tokens: no finish, no [DONE]."""
    client = await sim()
    resp = await client.post(
        CHAT, json=_stream_body(), headers={"X-Sim-Fault": "no-done", "X-Sim-Fault-After": "4"}
    )
    payloads = events(await resp.read())
    assert len(payloads) == 1 + 4
    assert all(b'"finish_reason":null' in p for p in payloads)


async def test_error_mid_stream(sim: SimFactory) -> None:
    """N token chunks, then vLLM's error event, then data: [DONE]."""
    client = await sim()
    resp = await client.post(
        CHAT,
        json=_stream_body(),
        headers=_fault("error-mid-stream", after="3"),
    )
    payloads = events(await resp.read())
    assert payloads[-2:] == [ERROR_EVENT, b"[DONE]"]
    assert sum(b'"reasoning"' in p for p in payloads) == 3
    text = await (await client.get("/metrics")).text()
    assert metric(text, "vllm:request_success_total", finished_reason="error") == 1
    assert metric(text, "vllm:num_requests_running") == 0


async def test_error_mid_stream_non_streaming_is_500(sim: SimFactory) -> None:
    """Without streaming the same fault is a 500 JSON body."""
    client = await sim()
    body = hello(model="sim-loop", max_tokens=40)
    resp = await client.post(CHAT, json=body, headers={"X-Sim-Fault": "error-mid-stream"})
    assert resp.status == 500
    assert await resp.read() == ERROR_EVENT


async def test_slow_first_token(sim: SimFactory) -> None:
    """Headers come at once; the first chunk only after X-Sim-Fault-Delay seconds."""
    client = await sim()
    start = time.monotonic()
    resp = await client.post(
        CHAT,
        json=_stream_body(),
        headers=_fault("slow-first-token", delay="0.4"),
    )
    assert resp.status == 200
    assert time.monotonic() - start < 0.3
    first = await resp.content.readline()
    assert time.monotonic() - start >= 0.4
    assert b'"role":"assistant"' in first
    payloads = events(first + await resp.read())
    assert payloads[-1] == b"[DONE]"


async def test_unknown_fault_is_400(sim: SimFactory) -> None:
    """A misspelled fault name is refused loudly, not ignored."""
    client = await sim()
    resp = await client.post(CHAT, json=_stream_body(), headers={"X-Sim-Fault": "explode"})
    assert resp.status == 400
    assert b"explode" in await resp.read()


async def test_faults_apply_to_completions(sim: SimFactory) -> None:
    """The faults work on /v1/completions too."""
    client: TestClient[Any, Any] = await sim()
    body = {"model": "sim-loop", "prompt": "Hi", "max_tokens": 20, "stream": True}
    resp = await client.post(
        "/v1/completions",
        json=body,
        headers={"X-Sim-Fault": "error-mid-stream", "X-Sim-Fault-After": "2"},
    )
    payloads = events(await resp.read())
    assert payloads[-2:] == [ERROR_EVENT, b"[DONE]"]
    assert sum(b'"text_completion"' in p for p in payloads) == 2


async def test_non_streaming_faults(sim: SimFactory) -> None:
    """Without streaming: a reset drops the connection, invalid-sse sends a non-JSON 200."""
    client = await sim()
    body = hello(model="sim-loop", max_tokens=40)
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await client.post(CHAT, json=body, headers=_fault("reset-mid-stream"))
    resp = await client.post(CHAT, json=body, headers=_fault("invalid-sse"))
    assert resp.status == 200
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(await resp.read())
    resp = await client.post(CHAT, json=body, headers=_fault("no-done"))
    assert (await resp.json())["usage"]["completion_tokens"] == 40
