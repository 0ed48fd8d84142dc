"""Serving chunks (on chat): the pace follows tokens_per_second, the running gauge counts
streams, and a client that goes away stops generation on the node, as on vLLM 0.32."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tests.simulator.conftest import SimFactory, hello, metric


async def test_pacing_follows_tokens_per_second(sim: SimFactory) -> None:
    """At 100 tok/s, 60 tokens take about 0.6 s (scheduled from the start, no drift)."""
    client = await sim(tokens_per_second=100.0)
    start = time.monotonic()
    resp = await client.post(
        "/v1/chat/completions", json=hello(model="sim-loop", max_tokens=60, stream=True)
    )
    await resp.read()
    took = time.monotonic() - start
    assert 0.55 <= took <= 1.5


async def test_running_gauge_counts_concurrent_streams(sim: SimFactory) -> None:
    """Two open streams show as 2 running; both finish back to 0."""
    client = await sim(tokens_per_second=50.0)
    body = hello(model="sim-loop", max_tokens=15, stream=True)
    tasks = [asyncio.create_task(client.post("/v1/chat/completions", json=body)) for _ in range(2)]
    responses = await asyncio.gather(*tasks)
    await asyncio.sleep(0.05)
    assert metric(await (await client.get("/metrics")).text(), "vllm:num_requests_running") == 2
    for resp in responses:
        await resp.read()
    assert metric(await (await client.get("/metrics")).text(), "vllm:num_requests_running") == 0


RUNNING = "vllm:num_requests_running"
GENERATED = "vllm:generation_tokens_total"
SUCCESS = "vllm:request_success_total"
GONE = "sim:disconnected_requests_total"


async def _metrics(client: TestClient[Any, Any]) -> str:
    resp = await client.get("/metrics")
    return await resp.text()


async def _wait_running(client: TestClient[Any, Any], want: float, limit: float) -> float:
    """Poll /metrics until the running gauge equals ``want``; return the time it took."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        if metric(await _metrics(client), RUNNING) == want:
            return time.monotonic() - start
        await asyncio.sleep(0.01)
    raise AssertionError(f"{RUNNING} did not reach {want} within {limit}s")


async def _assert_stopped(client: TestClient[Any, Any]) -> None:
    before = metric(await _metrics(client), GENERATED)
    await asyncio.sleep(0.3)
    after = metric(await _metrics(client), GENERATED)
    assert after == before, "the generated-token counter must stop after a disconnect"


@pytest.mark.parametrize("tps", [65.0, 0.0])
async def test_stream_disconnect_stops_generation_within_500ms(sim: SimFactory, tps: float) -> None:
    """Closing a stream drops running to 0 within 0.5 s; tokens stop; no success counted."""
    client = await sim(tokens_per_second=tps, max_model_len=10_000_000)
    resp = await client.post("/v1/chat/completions", json=hello(model="sim-loop", stream=True))
    for _ in range(4):
        await resp.content.readline()
    assert metric(await _metrics(client), RUNNING) == 1
    resp.close()
    took = await _wait_running(client, 0, 2.0)
    assert took <= 0.5
    await _assert_stopped(client)
    text = await _metrics(client)
    assert metric(text, SUCCESS) == 0
    assert metric(text, GONE) == 1
    assert metric(text, GENERATED) > 0


async def test_non_stream_disconnect_stops_generation(sim: SimFactory) -> None:
    """A non-streaming request abandoned mid-generation is aborted just the same."""
    client = await sim(tokens_per_second=200.0)
    task = asyncio.create_task(client.post("/v1/chat/completions", json=hello(model="sim-loop")))
    await _wait_running(client, 1, 2.0)
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    took = await _wait_running(client, 0, 2.0)
    assert took <= 0.5
    await _assert_stopped(client)
    text = await _metrics(client)
    assert metric(text, SUCCESS) == 0
    assert metric(text, GONE) == 1


async def test_disconnect_during_stall_is_noticed(sim: SimFactory) -> None:
    """sim-stall holds the stream open silently; closing it still frees the node."""
    client = await sim(tokens_per_second=0.0)
    resp = await client.post("/v1/chat/completions", json=hello(model="sim-stall", stream=True))
    for _ in range(3):
        await resp.content.readline()
    await asyncio.sleep(0.1)
    assert metric(await _metrics(client), RUNNING) == 1
    resp.close()
    assert await _wait_running(client, 0, 2.0) <= 0.5
    assert metric(await _metrics(client), GONE) == 1


async def test_finished_request_counts_as_success(sim: SimFactory) -> None:
    """A request that runs to its end is counted by finish reason and not as a disconnect."""
    client = await sim()
    resp = await client.post("/v1/chat/completions", json=hello(model="sim-loop", max_tokens=10))
    assert resp.status == 200
    await resp.read()
    text = await _metrics(client)
    assert metric(text, SUCCESS, finished_reason="length", model_name="sim-loop") == 1
    assert metric(text, GENERATED, model_name="sim-loop") == 10
    assert metric(text, RUNNING) == 0
    assert metric(text, GONE) == 0
