"""The exchange runner under upstream faults: defined client-visible results, and nothing
hangs."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import orjson
import pytest
from openai import APIError, AsyncOpenAI

from tests.stack import StackFactory, start_stack, stop_stack

BODY: dict[str, object] = {"model": "sim-healthy", "max_tokens": 400,
                           "messages": [{"role": "user", "content": "Say OK"}]}


async def post(url: str, body: dict[str, object], fault: str | None = None,
               **headers: str) -> tuple[int, bytes]:
    hdrs = dict(headers)
    if fault:
        hdrs["X-Sim-Fault"] = fault
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/chat/completions", json=body,
                                                    headers=hdrs) as r:
        return r.status, await r.read()


def error_events(data: bytes) -> list[dict[str, object]]:
    return [orjson.loads(e[6:])["error"] for e in data.split(b"\n\n")
            if e.startswith(b'data: {"error"')]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("stream", [True, False])
async def test_upstream_down_is_502(stream: bool) -> None:
    """With nothing listening upstream the client gets a 502 OpenAI-style error."""
    stack = await start_stack(upstream=f"http://127.0.0.1:{free_port()}")
    status, body = await post(stack.url, {**BODY, "stream": stream})
    await stop_stack(stack)
    assert status == 502
    assert orjson.loads(body)["error"]["type"] == "BadGatewayError"


@pytest.mark.parametrize("stream", [True, False])
async def test_reset_before_headers_is_502(make_stack: StackFactory, stream: bool) -> None:
    """A connection reset before the status line becomes a 502 JSON error."""
    stack = await make_stack()
    status, body = await post(stack.url, {**BODY, "stream": stream}, "reset-before-headers")
    assert status == 502
    assert orjson.loads(body)["error"]["code"] == 502


async def test_reset_mid_stream_streaming(make_stack: StackFactory) -> None:
    """A reset after headers ends the stream with an error event and [DONE]."""
    stack = await make_stack()
    status, data = await post(stack.url, {**BODY, "stream": True}, "reset-mid-stream")
    assert status == 200
    assert [e["code"] for e in error_events(data)] == [502]
    assert data.endswith(b"data: [DONE]\n\n")
    assert stack.metric("runaway_sidecar_upstream_errors_total", kind="reset") == 1


async def test_reset_mid_stream_sdk_raises_cleanly(make_stack: StackFactory) -> None:
    """The openai SDK surfaces the in-stream error as an APIError, not a parse failure."""
    stack = await make_stack()
    client = AsyncOpenAI(base_url=stack.url + "/v1", api_key="k", max_retries=0)
    stream = await client.chat.completions.create(
        **{**BODY, "stream": True}, extra_headers={"X-Sim-Fault": "reset-mid-stream"})  # type: ignore[call-overload]
    with pytest.raises(APIError):
        async for _ in stream:
            pass
    await client.close()


async def test_reset_mid_stream_nonstreaming(make_stack: StackFactory) -> None:
    """A non-streaming client gets a 502 when the upstream breaks mid-response."""
    stack = await make_stack()
    status, body = await post(stack.url, BODY, "reset-mid-stream")
    assert status == 502
    assert orjson.loads(body)["error"]["code"] == 502


@pytest.mark.parametrize("stream", [True, False])
async def test_http_500_relayed(make_stack: StackFactory, stream: bool) -> None:
    """vLLM's own 500 reaches the client unchanged."""
    stack = await make_stack()
    direct = await post(stack.sim_url, {**BODY, "stream": stream}, "http-500")
    proxied = await post(stack.url, {**BODY, "stream": stream}, "http-500")
    assert proxied == direct
    assert proxied[0] == 500


@pytest.mark.parametrize("stream", [True, False])
async def test_invalid_sse_is_a_clean_error(make_stack: StackFactory, stream: bool) -> None:
    """A 200 whose body is not an SSE stream of chunks becomes a 502 error."""
    stack = await make_stack()
    status, body = await post(stack.url, {**BODY, "stream": stream}, "invalid-sse")
    assert status == 502
    assert orjson.loads(body)["error"]["type"] == "BadGatewayError"
    assert stack.metric("runaway_sidecar_upstream_errors_total", kind="protocol") == 1


async def test_truncated_stream_without_done(make_stack: StackFactory) -> None:
    """A stream cut off without [DONE] before its choices finished gets an error event."""
    stack = await make_stack()
    status, data = await post(stack.url, {**BODY, "stream": True}, "no-done",
                              **{"X-Sim-Fault-After": "5"})
    assert status == 200
    assert [e["code"] for e in error_events(data)] == [502]
    assert data.endswith(b"data: [DONE]\n\n")


async def test_complete_stream_without_done_is_passed_as_is(make_stack: StackFactory) -> None:
    """A finished stream that lacks only [DONE] is relayed as vLLM sent it."""
    stack = await make_stack()
    direct = await post(stack.sim_url, {**BODY, "stream": True}, "no-done")
    proxied = await post(stack.url, {**BODY, "stream": True}, "no-done")
    assert proxied[0] == 200
    assert b"[DONE]" not in proxied[1]
    assert len(proxied[1]) == len(direct[1])


async def test_error_mid_stream_relayed(make_stack: StackFactory) -> None:
    """vLLM's own in-stream error event and [DONE] pass through."""
    stack = await make_stack()
    status, data = await post(stack.url, {**BODY, "stream": True}, "error-mid-stream")
    assert status == 200
    assert [e["code"] for e in error_events(data)] == [500]
    assert data.endswith(b"data: [DONE]\n\n")


async def test_stall_mid_stream_is_cut_and_ends(make_stack: StackFactory) -> None:
    """A stream that goes silent is cut by the stall detector; the response still ends."""
    stack = await make_stack(detectors={"stall_seconds": 0.3})
    status, data = await post(stack.url, {**BODY, "stream": True}, "stall-mid-stream")
    assert status == 200
    assert b"detector=stall" in data
    assert data.endswith(b"data: [DONE]\n\n")
    assert await stack.sim_metric("vllm:num_requests_running") == 0


async def test_stall_in_shadow_mode_leaves_the_stream_open(make_stack: StackFactory) -> None:
    """In shadow mode a silent upstream is only noticed: the client's stream stays open
    (as it would on vLLM directly), with no error, no [DONE] and nothing cut upstream."""
    stack = await make_stack(detectors={"stall_seconds": 0.3})
    headers = {"X-Sim-Fault": "stall-mid-stream", "X-Runaway-Mode": "shadow"}
    received = bytearray()  # filled chunk by chunk, so it survives the timeout

    async def read_all(r: aiohttp.ClientResponse) -> None:
        async for chunk in r.content.iter_any():
            received.extend(chunk)

    async with aiohttp.ClientSession() as s, s.post(
        stack.url + "/v1/chat/completions", json={**BODY, "stream": True}, headers=headers
    ) as r:
        assert r.status == 200
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(read_all(r), 1.5)  # five stall windows
        assert await stack.sim_metric("vllm:num_requests_running") == 1
    data = bytes(received)
    assert data.count(b"data: {") >= 3
    assert b"[DONE]" not in data
    assert b"error" not in data
    assert b": runaway" not in data


async def test_sim_stall_model_reissued(make_stack: StackFactory) -> None:
    """``sim-stall`` stops mid-stream; the reissue answers with thinking off."""
    stack = await make_stack(detectors={"stall_seconds": 0.3})
    client = AsyncOpenAI(base_url=stack.url + "/v1", api_key="k", max_retries=0)
    reply = await client.chat.completions.create(**{**BODY, "model": "sim-stall"})  # type: ignore[call-overload]
    await client.close()
    assert reply.choices[0].message.content
    assert reply.choices[0].finish_reason == "stop"


async def test_slow_first_token_under_read_timeout(make_stack: StackFactory) -> None:
    """A slow first token within the stall window is waited for, not cut."""
    stack = await make_stack(detectors={"stall_seconds": 2.0})
    status, data = await post(stack.url, {**BODY, "stream": True}, "slow-first-token",
                              **{"X-Sim-Fault-Delay": "0.5"})
    assert status == 200
    assert b": runaway" not in data
    assert data.endswith(b"data: [DONE]\n\n")
