"""OpenAI ``/v1/responses`` through the sidecar, with the official ``openai`` SDK, against
the simulated node: cut, reissue and splice in every mode, the non-streaming body,
budgets, history cleaning, pass-through and errors."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from openai import AsyncOpenAI, BadRequestError, NotFoundError

from sidecar.core.wire import CUT_NOTE
from tests.net.agent_helpers import ANSWER, PROMPT, comments, idle, post, sse_events
from tests.stack import Stack, StackFactory


def body(model: str = "sim-loop", **extra: Any) -> dict[str, Any]:
    return {"model": model, "max_output_tokens": 4000, "input": PROMPT, **extra}


@pytest.fixture
async def client(make_stack: StackFactory) -> AsyncIterator[tuple[Stack, AsyncOpenAI]]:
    """A stack and an official OpenAI client pointed at its sidecar."""
    stack = await make_stack(detectors={"stall_seconds": 0.3})
    openai = AsyncOpenAI(base_url=stack.url + "/v1", api_key="k", max_retries=0)
    yield stack, openai
    await openai.close()


def check_numbering(events: list[tuple[str, dict[str, Any]]]) -> None:
    """One created, sequence numbers 0, 1, 2, ... over every event, every item added at
    the next output_index and done, one completed with the created response's id."""
    names = [name for name, _ in events]
    assert names.count("response.created") == 1
    assert names.count("response.completed") == 1
    assert names[-1] == "response.completed"
    assert [e["sequence_number"] for _, e in events] == list(range(len(events)))
    added = [e["output_index"] for n, e in events if n == "response.output_item.added"]
    done = [e["output_index"] for n, e in events if n == "response.output_item.done"]
    assert added == list(range(len(added))) == done
    created = events[0][1]["response"]
    final = events[-1][1]["response"]
    assert (final["id"], final["created_at"]) == (created["id"], created["created_at"])
    items = [e["item"]["id"] for n, e in events if n == "response.output_item.done"]
    assert [item["id"] for item in final["output"]] == items


async def test_a_streamed_loop_is_one_well_formed_response(
        client: tuple[Stack, AsyncOpenAI]) -> None:
    """The reasoning loop is cut and the thinking-off answer spliced in: the cut
    reasoning item closed (status incomplete), the answer's message item next, one
    completed response with both items, the client's own reasoning echo and every
    attempt's tokens."""
    stack, _ = client
    status, headers, data = await post(stack.url + "/v1/responses", {
        **body(), "stream": True, "reasoning": {"effort": "high"}})
    assert status == 200
    assert headers["Content-Type"].startswith("text/event-stream")
    events = sse_events(data)
    check_numbering(events)
    final = events[-1][1]["response"]
    assert [(i["type"], i["status"]) for i in final["output"]] == [
        ("reasoning", "incomplete"), ("message", "completed")]
    assert final["output"][1]["content"][0]["text"].strip() == ANSWER
    assert final["reasoning"] == {"effort": "high"}
    assert final["status"] == "completed"
    reasoning = sum(1 for n, _ in events if n == "response.reasoning_text.delta")
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] >= reasoning
    assert final["usage"]["total_tokens"] == (final["usage"]["input_tokens"]
                                              + final["usage"]["output_tokens"])
    assert [c for c in comments(data) if c.startswith(b": runaway")]
    assert stack.metric("runaway_sidecar_requests_total", route="responses", model="sim-loop",
                        outcome="reissued") == 1
    assert await idle(stack)


@pytest.mark.parametrize("model", ["sim-loop", "sim-paraphrase-loop", "sim-stall"])
async def test_the_sdk_stream_helper_gets_the_answer(
        client: tuple[Stack, AsyncOpenAI], model: str) -> None:
    """``responses.stream`` assembles one response: the cut reasoning, then the answer."""
    _, openai = client
    async with openai.responses.stream(**body(model)) as stream:
        async for _event in stream:
            pass
        final = await stream.get_final_response()
    assert [item.type for item in final.output] == ["reasoning", "message"]
    assert final.output_text.strip()
    if model == "sim-loop":
        assert final.output_text.strip() == ANSWER
    assert final.status == "completed"


async def test_a_non_streaming_loop_gets_the_answer_and_headers(
        client: tuple[Stack, AsyncOpenAI]) -> None:
    """``responses.create`` without streaming gets vLLM's body (reasoning items with
    status null) with the reissued answer, the X-Runaway headers and both attempts'
    tokens."""
    stack, openai = client
    raw = await openai.responses.with_raw_response.create(**body())
    assert raw.headers["X-Runaway-Detector"] == "periodic"
    assert raw.headers["X-Runaway-Attempts"] == "2"
    response = raw.parse()
    assert [(i.type, getattr(i, "status", None)) for i in response.output] == [
        ("reasoning", None), ("message", "completed")]
    assert response.output_text.strip() == ANSWER
    assert response.usage is not None
    assert response.usage.output_tokens > 100  # the cut attempt (~160) and the answer
    assert await idle(stack)


async def test_a_leaky_model_runs_the_ladder_out(client: tuple[Stack, AsyncOpenAI]) -> None:
    """With thinking off the leaky model loops in its answer too: cut again, the ladder
    is over, the response is incomplete for max_output_tokens with both items closed."""
    stack, _ = client
    _, _, data = await post(stack.url + "/v1/responses", {**body("sim-leaky"), "stream": True})
    events = sse_events(data)
    check_numbering(events)
    final = events[-1][1]["response"]
    assert (final["status"], final["incomplete_details"]) == (
        "incomplete", {"reason": "max_output_tokens"})
    assert [i["type"] for i in final["output"]] == ["reasoning", "message"]
    # Both attempts were cut before their usage: each is billed the prompt's estimate.
    assert final["usage"]["input_tokens"] > 0
    assert final["usage"]["total_tokens"] == (final["usage"]["input_tokens"]
                                              + final["usage"]["output_tokens"])
    assert stack.metric("runaway_sidecar_requests_total", route="responses",
                        model="sim-leaky", outcome="exhausted") == 1


async def test_a_healthy_stream_is_forwarded_unchanged(client: tuple[Stack, AsyncOpenAI]) -> None:
    """A healthy stream through the sidecar is the upstream's, byte for byte, ids and
    timestamps aside (the simulator draws them afresh)."""
    stack, _ = client
    request = {**body("sim-healthy"), "stream": True}
    _, _, direct = await post(stack.sim_url + "/v1/responses", request)
    _, _, proxied = await post(stack.url + "/v1/responses", request)

    def normalized(data: bytes) -> bytes:
        ids: dict[str, str] = {}
        out = data
        for _, event in sse_events(data):
            for key in ("id", "item_id"):
                for holder in (event, event.get("item") or {}, event.get("response") or {}):
                    value = holder.get(key)
                    if isinstance(value, str):
                        ids.setdefault(value, f"ID{len(ids)}")
            created = (event.get("response") or {}).get("created_at")
            if created is not None:
                out = out.replace(f'"created_at":{created}'.encode(), b'"created_at":0')
        for value, name in ids.items():
            out = out.replace(value.encode(), name.encode())
        return out

    assert normalized(proxied) == normalized(direct)
    assert not comments(proxied)


async def test_hidden_reasoning_is_watched_and_stays_hidden(
        client: tuple[Stack, AsyncOpenAI]) -> None:
    """With ``include_reasoning: false`` the sidecar still sees the loop (it asks for the
    reasoning) and the client still sees none: no reasoning item, the answer as item 0,
    numbering as the server gives it without reasoning; a healthy stream is the one the
    server sends for that request."""
    stack, _ = client
    _, _, data = await post(stack.url + "/v1/responses", {
        **body(), "stream": True, "include_reasoning": False})
    events = sse_events(data)
    check_numbering(events)
    assert not [n for n, _ in events if "reasoning" in n]
    final = events[-1][1]["response"]
    assert [i["type"] for i in final["output"]] == ["message"]
    assert final["output"][0]["content"][0]["text"].strip() == ANSWER
    assert stack.metric("runaway_sidecar_requests_total", route="responses", model="sim-loop",
                        outcome="reissued") == 1
    healthy = {**body("sim-healthy"), "stream": True, "include_reasoning": False}
    _, _, direct = await post(stack.sim_url + "/v1/responses", healthy)
    _, _, proxied = await post(stack.url + "/v1/responses", healthy)
    strip = [(n, {k: v for k, v in e.items() if k not in ("item_id",)})
             for n, e in sse_events(direct)]
    assert [n for n, _ in sse_events(proxied)] == [n for n, _ in strip]
    assert [e.get("sequence_number") for _, e in sse_events(proxied)] == [
        e.get("sequence_number") for _, e in strip]
    assert [e.get("output_index") for _, e in sse_events(proxied)] == [
        e.get("output_index") for _, e in strip]


async def test_cut_mode_ends_incomplete(client: tuple[Stack, AsyncOpenAI]) -> None:
    """cut: the response ends at the cut, incomplete for max_output_tokens."""
    stack, openai = client
    response = await openai.responses.create(**body(), extra_headers={"X-Runaway-Mode": "cut"})
    assert (response.status, response.incomplete_details and
            response.incomplete_details.reason) == ("incomplete", "max_output_tokens")
    assert [i.type for i in response.output] == ["reasoning"]
    assert stack.metric("runaway_sidecar_requests_total", route="responses", model="sim-loop",
                        outcome="cut") == 1


async def test_the_history_of_a_cut_turn_is_cleaned(make_stack: StackFactory) -> None:
    """A later request that sends the cut reasoning item back (by its id) reaches the
    node with a short note instead of the looped text; other reasoning items are left
    alone."""
    stack = await make_stack(tap=True)
    assert stack.tap is not None
    openai = AsyncOpenAI(base_url=stack.url + "/v1", api_key="k", max_retries=0)
    first = await openai.responses.create(**body())
    reasoning, message = first.output
    assert reasoning.type == "reasoning"
    looped = reasoning.content[0].text  # type: ignore[union-attr, index]
    history: list[Any] = [{"role": "user", "content": PROMPT},
                          reasoning.model_dump(exclude_none=True),
                          message.model_dump(exclude_none=True),
                          {"role": "user", "content": "Thanks. Anything else?"}]
    await openai.responses.create(**body("sim-healthy", input=history, max_output_tokens=50))
    sent = orjson.loads(stack.tap.bodies[-1])["input"][1]
    assert sent["content"] == [{"type": "reasoning_text", "text": CUT_NOTE}]
    assert sent["id"] == reasoning.id
    assert stack.metric("runaway_sidecar_history_cleaned_total", route="responses") == 1
    history[1] = {**history[1], "id": "rs_0123456789abcdef"}
    await openai.responses.create(**body("sim-healthy", input=history, max_output_tokens=50))
    assert orjson.loads(stack.tap.bodies[-1])["input"][1]["content"][0]["text"] == looped
    await openai.close()


async def test_pass_through_and_errors(client: tuple[Stack, AsyncOpenAI]) -> None:
    """background, GET and cancel pass through to the node (which refuses them without
    its store); the node's errors reach the client as they came; the sidecar's own have
    OpenAI's shape."""
    stack, openai = client
    status, _, data = await post(stack.url + "/v1/responses", {**body(), "background": True})
    direct_status, _, direct = await post(stack.sim_url + "/v1/responses",
                                          {**body(), "background": True})
    assert (status, data) == (direct_status, direct)
    assert status == 400
    async with aiohttp.ClientSession() as s:
        for method, path in (("GET", "/v1/responses/resp_x"),
                             ("POST", "/v1/responses/resp_x/cancel")):
            async with s.request(method, stack.url + path) as r:
                assert r.status == 404
    with pytest.raises(NotFoundError):
        await openai.responses.create(**body("no-such-model"))
    with pytest.raises(BadRequestError) as bad:
        await openai.responses.create(**body(), extra_headers={"X-Thinking": "maybe"})
    assert bad.value.body == {"message": "X-Thinking must be one of on, off, auto",
                              "type": "BadRequestError", "param": "X-Thinking", "code": 400}
    assert stack.metric("runaway_sidecar_requests_total", route="responses",
                        model="sim-loop", outcome="rejected") == 1


async def test_a_disconnect_stops_generation(client: tuple[Stack, AsyncOpenAI]) -> None:
    """A client that leaves mid-stream, in the first attempt or in the reissue, leaves
    the node idle."""
    stack, _ = client
    for model, until in (("sim-loop", b"reasoning_text.delta"), ("sim-leaky", b": runaway")):
        async with aiohttp.ClientSession() as session:
            resp = await session.post(stack.url + "/v1/responses", json={
                **body(model, input=model), "stream": True})
            seen = b""
            while until not in seen:
                seen += await resp.content.readany()
            resp.close()
        deadline = time.monotonic() + 2
        while not await idle(stack):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
    assert stack.metric("runaway_sidecar_client_disconnects_total", route="responses") == 2


async def test_the_policy_reads_instructions(make_stack: StackFactory) -> None:
    """A policy rule on the system prompt matches the Responses ``instructions``, and a
    rule on the last user message its ``input``."""
    from sidecar.config import PolicyConfig, PolicyRule

    rules = (PolicyRule(name="terse", system="^Be terse", thinking="off"),
             PolicyRule(name="quick", last_user="^Quick", thinking="off"))
    stack = await make_stack(policy=PolicyConfig(rules=rules))
    await post(stack.url + "/v1/responses", body("sim-healthy", instructions="Be terse."))
    await post(stack.url + "/v1/responses", body("sim-healthy", input=[
        {"role": "user", "content": [{"type": "input_text", "text": "Quick: 2+2?"}]}]))
    assert await stack.sim_metric("sim:requests_total", thinking="off") == 2
    assert stack.metric("runaway_sidecar_policy_decisions_total", rule="terse") == 1
    assert stack.metric("runaway_sidecar_policy_decisions_total", rule="quick") == 1
