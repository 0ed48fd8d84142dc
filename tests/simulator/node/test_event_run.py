"""/v1/messages and /v1/responses on the simulated node: disconnects stop generation as on
chat, the vLLM metrics count these requests, and each X-Sim-Fault fails as named."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestClient

from tests.simulator.conftest import SimFactory, metric

RUNNING = "vllm:num_requests_running"
GENERATED = "vllm:generation_tokens_total"
SUCCESS = "vllm:request_success_total"
PROMPT = "vllm:prompt_tokens_total"
GONE = "sim:disconnected_requests_total"


@dataclass(frozen=True)
class Api:
    """One agent endpoint: its path, a request body, and the marker of a text event."""

    name: str
    path: str
    marker: bytes
    last_event: bytes

    def body(self, model: str = "sim-loop", max_tokens: int = 40, **extra: Any) -> dict[
            str, Any]:
        if self.name == "messages":
            return {"model": model, "max_tokens": max_tokens,
                    "messages": [{"role": "user", "content": "Hello"}], **extra}
        return {"model": model, "input": "Hello", "max_output_tokens": max_tokens, **extra}


MESSAGES = Api("messages", "/v1/messages", b'"thinking_delta"', b"event: message_stop\n")
RESPONSES = Api("responses", "/v1/responses", b"event: response.reasoning_text.delta\n",
                b"event: response.completed\n")
APIS = [MESSAGES, RESPONSES]
IDS = [a.name for a in APIS]


async def _metrics(client: TestClient[Any, Any]) -> str:
    return await (await client.get("/metrics")).text()


async def _wait_running(client: TestClient[Any, Any], want: float, limit: float) -> float:
    """Poll /metrics until the running gauge equals ``want``; return the time it took."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        if metric(await _metrics(client), RUNNING) == want:
            return time.monotonic() - start
        await asyncio.sleep(0.01)
    raise AssertionError(f"{RUNNING} did not reach {want} within {limit}s")


async def _text_events(resp: aiohttp.ClientResponse, api: Api, count: int) -> None:
    seen = 0
    while seen < count:
        line = await asyncio.wait_for(resp.content.readline(), 2.0)
        seen += api.marker in line


async def _read_until_error(resp: aiohttp.ClientResponse) -> tuple[bytes, BaseException | None]:
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


# ------------------------------------------------------------------------ disconnects


@pytest.mark.parametrize("tps", [65.0, 0.0])
@pytest.mark.parametrize("api", APIS, ids=IDS)
async def test_stream_disconnect_stops_generation(sim: SimFactory, api: Api, tps: float) -> None:
    """Closing a stream drops running to 0 (within 2 s: a bound a loaded 2-core machine
    cannot cross, where 0.5 s was crossed once); the token counter freezes; the request
    counts as a disconnect, not a success."""
    client = await sim(tokens_per_second=tps, max_model_len=10_000_000)
    resp = await client.post(api.path, json=api.body(max_tokens=9_000_000, stream=True))
    await _text_events(resp, api, 3)
    assert metric(await _metrics(client), RUNNING) == 1
    resp.close()
    await _wait_running(client, 0, 2.0)
    before = metric(await _metrics(client), GENERATED)
    await asyncio.sleep(0.3)
    text = await _metrics(client)
    assert metric(text, GENERATED) == before > 0
    assert metric(text, SUCCESS) == 0
    assert metric(text, GONE) == 1


@pytest.mark.parametrize("api", APIS, ids=IDS)
async def test_non_stream_disconnect_stops_generation(sim: SimFactory, api: Api) -> None:
    """An abandoned non-streaming request is aborted just the same."""
    client = await sim(tokens_per_second=200.0, max_model_len=10_000_000)
    task = asyncio.create_task(client.post(api.path, json=api.body(max_tokens=9_000_000)))
    await _wait_running(client, 1, 2.0)
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _wait_running(client, 0, 2.0)
    text = await _metrics(client)
    assert metric(text, SUCCESS) == 0
    assert metric(text, GONE) == 1


@pytest.mark.parametrize("api", APIS, ids=IDS)
async def test_disconnect_during_stall(sim: SimFactory, api: Api) -> None:
    """sim-stall goes silent after 24 thinking tokens; closing it still frees the node."""
    client = await sim()
    resp = await client.post(api.path, json=api.body(model="sim-stall", stream=True,
                                                     max_tokens=500))
    await _text_events(resp, api, 24)
    while await resp.content.readline() != b"\n":  # the rest of the 24th event
        pass
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(resp.content.readline(), 0.3)
    assert metric(await _metrics(client), RUNNING) == 1
    resp.close()
    await _wait_running(client, 0, 2.0)
    assert metric(await _metrics(client), GONE) == 1


# ---------------------------------------------------------------------------- metrics


@pytest.mark.parametrize("api", APIS, ids=IDS)
async def test_metrics_count_agent_requests(sim: SimFactory, api: Api) -> None:
    """A finished request counts its prompt, every generated token (the unseen <think>
    included), one success by finish reason, and the thinking label."""
    client = await sim()
    await (await client.post(api.path, json=api.body(max_tokens=25, stream=True))).read()
    off = api.body(max_tokens=25)
    off["chat_template_kwargs"] = {"enable_thinking": False}
    await (await client.post(api.path, json=off)).read()
    text = await _metrics(client)
    assert metric(text, GENERATED, model_name="sim-loop") == 25 + 9  # the answer and its EOS
    assert metric(text, SUCCESS, model_name="sim-loop", finished_reason="length") == 1
    assert metric(text, SUCCESS, model_name="sim-loop", finished_reason="stop") == 1
    assert metric(text, PROMPT, model_name="sim-loop") == 9 + 13
    assert metric(text, "sim:requests_total", model_name="sim-loop", thinking="on") == 1
    assert metric(text, "sim:requests_total", model_name="sim-loop", thinking="off") == 1
    assert metric(text, RUNNING) == 0
    assert metric(text, GONE) == 0


async def test_count_tokens_generates_nothing(sim: SimFactory) -> None:
    """count_tokens renders the prompt only: no request, no token is counted."""
    client = await sim()
    resp = await client.post("/v1/messages/count_tokens", json={
        "model": "sim-loop", "messages": [{"role": "user", "content": "Hello"}]})
    assert await resp.json() == {"input_tokens": 9,
                                 "context_management": {"original_input_tokens": 9}}
    text = await _metrics(client)
    assert metric(text, "sim:requests_total") == 0
    assert metric(text, GENERATED) == 0


# ----------------------------------------------------------------------------- faults


@pytest.mark.parametrize("api", APIS, ids=IDS)
async def test_reset_mid_stream(sim: SimFactory, api: Api) -> None:
    """After N text events the transport is aborted mid-body."""
    client = await sim()
    resp = await client.post(api.path, json=api.body(stream=True),
                             headers=_fault("reset-mid-stream", after="3"))
    received, error = await _read_until_error(resp)
    assert isinstance(error, aiohttp.ClientPayloadError)
    assert received.count(api.marker) == 3
    assert api.last_event not in received
    text = await _metrics(client)
    assert metric(text, RUNNING) == 0
    assert metric(text, SUCCESS) == 0


@pytest.mark.parametrize("api", APIS, ids=IDS)
async def test_stall_mid_stream(sim: SimFactory, api: Api) -> None:
    """After N text events nothing more arrives, and the connection stays open."""
    client = await sim()
    resp = await client.post(api.path, json=api.body(stream=True),
                             headers=_fault("stall-mid-stream", after="2"))
    await _text_events(resp, api, 2)
    while await resp.content.readline() != b"\n":  # the rest of the second event
        pass
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(resp.content.readline(), 0.4)
    assert metric(await _metrics(client), RUNNING) == 1
    resp.close()


async def test_http_500_in_each_shape(sim: SimFactory) -> None:
    """http-500: Anthropic-shaped on messages, OpenAI-shaped on responses."""
    client = await sim()
    resp = await client.post("/v1/messages", json=MESSAGES.body(),
                             headers={"X-Sim-Fault": "http-500"})
    assert resp.status == 500
    assert await resp.read() == (b'{"type":"error","error":{"type":"InternalServerError",'
                                 b'"message":"Internal server error"}}')
    resp = await client.post("/v1/responses", json=RESPONSES.body(),
                             headers={"X-Sim-Fault": "http-500"})
    assert resp.status == 500
    assert await resp.read() == (b'{"error":{"message":"Internal server error","type":'
                                 b'"InternalServerError","param":null,"code":500}}')


async def test_error_mid_stream_messages_is_a_lone_error_event(sim: SimFactory) -> None:
    """messages: N text events, then vLLM's lone event: error with pydantic's text (its
    converter cannot parse the chat error line); no block stop, no message_stop."""
    client = await sim()
    resp = await client.post("/v1/messages", json=MESSAGES.body(stream=True),
                             headers=_fault("error-mid-stream", after="3"))
    body = await resp.read()
    last = body.split(b"\n\n")[-2]
    assert last.startswith(b'event: error\ndata: {"type":"error","error":{"type":'
                           b'"internal_error","message":"2 validation errors for '
                           b"ChatCompletionStreamResponse\\nmodel\\n  Field required")
    assert body.count(MESSAGES.marker) == 3
    assert b"content_block_stop" not in body
    assert b"message_stop" not in body
    text = await _metrics(client)
    assert metric(text, SUCCESS, finished_reason="error") == 1
    assert metric(text, GONE) == 0


async def test_error_mid_stream_responses_ends_the_connection(sim: SimFactory) -> None:
    """responses: N text events, then the connection ends: no error event, no
    response.completed (vLLM 0.32's exception escapes the stream)."""
    client = await sim()
    resp = await client.post("/v1/responses", json=RESPONSES.body(stream=True),
                             headers=_fault("error-mid-stream", after="3"))
    received, error = await _read_until_error(resp)
    assert isinstance(error, aiohttp.ClientPayloadError)
    assert received.count(RESPONSES.marker) == 3
    assert b"response.completed" not in received
    assert b"error" not in received
    assert metric(await _metrics(client), SUCCESS, finished_reason="error") == 1


@pytest.mark.parametrize("api", APIS, ids=IDS)
async def test_error_mid_stream_non_streaming_is_500(sim: SimFactory, api: Api) -> None:
    """Without streaming the fault is a 500 body in the endpoint's shape."""
    client = await sim()
    resp = await client.post(api.path, json=api.body(), headers=_fault("error-mid-stream"))
    assert resp.status == 500
    assert b"Internal server error" in await resp.read()


async def test_slow_first_token_where_each_api_waits(sim: SimFactory) -> None:
    """messages sends message_start with the first engine output, so nothing comes before
    the delay; responses sends created and in_progress at once, then waits."""
    client = await sim()
    start = time.monotonic()
    resp = await client.post("/v1/messages", json=MESSAGES.body(stream=True),
                             headers=_fault("slow-first-token", delay="0.4"))
    assert time.monotonic() - start < 0.3
    assert (await resp.content.readline()).startswith(b"event: message_start")
    assert time.monotonic() - start >= 0.4
    await resp.read()
    start = time.monotonic()
    resp = await client.post("/v1/responses", json=RESPONSES.body(stream=True),
                             headers=_fault("slow-first-token", delay="0.4"))
    head = b"".join([await resp.content.readline() for _ in range(6)])
    assert time.monotonic() - start < 0.3
    assert head.count(b"event: response.") == 2
    assert b"response.output_item.added" in await resp.content.readline()
    assert time.monotonic() - start >= 0.4
    await resp.read()


@pytest.mark.parametrize("api", APIS, ids=IDS)
async def test_no_done_leaves_out_the_last_event(sim: SimFactory, api: Api) -> None:
    """no-done: the whole stream but its last event; with a count it stops there."""
    client = await sim()
    body = await (await client.post(api.path, json=api.body(stream=True),
                                    headers={"X-Sim-Fault": "no-done"})).read()
    assert body.endswith(b"\n\n")
    assert api.last_event not in body
    assert body.count(api.marker) == 39
    body = await (await client.post(api.path, json=api.body(stream=True),
                                    headers=_fault("no-done", after="4"))).read()
    assert body.count(api.marker) == 4
    assert b"content_block_stop" not in body
    assert b"output_item.done" not in body


@pytest.mark.parametrize("api", APIS, ids=IDS)
async def test_invalid_sse_and_reset_before_headers(sim: SimFactory, api: Api) -> None:
    """invalid-sse: a 200 of garbage; reset-before-headers: no status line at all."""
    client = await sim()
    resp = await client.post(api.path, json=api.body(stream=True),
                             headers={"X-Sim-Fault": "invalid-sse"})
    assert resp.status == 200
    with pytest.raises(UnicodeDecodeError):
        (await resp.read()).decode()
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await client.post(api.path, json=api.body(stream=True),
                          headers={"X-Sim-Fault": "reset-before-headers"})


@pytest.mark.parametrize("api", APIS, ids=IDS)
async def test_unknown_fault_is_400(sim: SimFactory, api: Api) -> None:
    """A misspelled fault name is refused loudly."""
    client = await sim()
    resp = await client.post(api.path, json=api.body(), headers={"X-Sim-Fault": "explode"})
    assert resp.status == 400
    assert b"explode" in await resp.read()


# -------------------------------------------------------------------------------- ids


async def test_ids_follow_vllm(sim: SimFactory) -> None:
    """messages takes X-Request-Id into chatcmpl-…; responses takes the body's
    request_id as its id; otherwise 16 random hex digits."""
    client = await sim()
    resp = await client.post("/v1/messages", json=MESSAGES.body(max_tokens=3),
                             headers={"X-Request-Id": "abc"})
    assert (await resp.json())["id"] == "chatcmpl-abc"
    resp = await client.post("/v1/responses", json=RESPONSES.body(max_tokens=3,
                                                                  request_id="resp_mine"))
    assert (await resp.json())["id"] == "resp_mine"
    resp = await client.post("/v1/responses", json=RESPONSES.body(max_tokens=3))
    ident = (await resp.json())["id"]
    assert ident.startswith("resp_")
    assert len(ident) == 5 + 16
    int(ident[5:], 16)


async def test_replay_trace_header_applies(tmp_path: Any, sim: SimFactory) -> None:
    """X-Sim-Trace picks the sim-replay trace on these routes as on chat."""
    path = tmp_path / "t.jsonl"
    path.write_bytes(orjson.dumps({"id": "a", "text": "<think> one two</think> Done."}) + b"\n"
                     + orjson.dumps({"id": "b", "text": "<think> three</think> Ok."}) + b"\n")
    client = await sim(replay_file=path)
    resp = await client.post("/v1/messages", json=MESSAGES.body(model="sim-replay",
                                                                max_tokens=50),
                             headers={"X-Sim-Trace": "b"})
    blocks = (await resp.json())["content"]
    assert [b["type"] for b in blocks] == ["thinking", "text"]
    assert blocks[0]["thinking"] == " three"
    assert blocks[1]["text"] == " Ok."
    resp = await client.post("/v1/messages", json=MESSAGES.body(model="sim-replay"),
                             headers={"X-Sim-Trace": "zzz"})
    assert resp.status == 404
