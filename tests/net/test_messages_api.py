"""Anthropic ``/v1/messages`` through the sidecar, with the official ``anthropic`` SDK,
against the simulated node: cut, reissue and splice in every mode, the non-streaming
body, budgets, history cleaning, pass-through and errors."""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from anthropic import AsyncAnthropic, BadRequestError, NotFoundError

from sidecar.apis.messages.splice import MARK_PREFIX
from sidecar.core.wire import CUT_NOTE
from tests.net.agent_helpers import ANSWER, PROMPT, comments, idle, post, sse_events
from tests.net.test_agent_loops import events, log_output  # noqa: F401 (a fixture)
from tests.stack import Stack, StackFactory

MESSAGES = [{"role": "user", "content": PROMPT}]


def body(model: str = "sim-loop", **extra: Any) -> dict[str, Any]:
    return {"model": model, "max_tokens": 4000, "messages": MESSAGES, **extra}


@pytest.fixture
async def client(make_stack: StackFactory) -> AsyncIterator[tuple[Stack, AsyncAnthropic]]:
    """A stack and an official Anthropic client pointed at its sidecar."""
    stack = await make_stack(detectors={"stall_seconds": 0.3})
    anthropic = AsyncAnthropic(base_url=stack.url, api_key="k", max_retries=0)
    yield stack, anthropic
    await anthropic.close()


def text_of(message: Any) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


async def test_a_streamed_loop_is_one_well_formed_message(
        client: tuple[Stack, AsyncAnthropic]) -> None:
    """The thinking loop is cut and the thinking-off answer spliced in: one
    message_start, the cut thinking block closed with the sidecar's signature, block
    indices 0 and 1, one message_delta with every attempt's tokens, one message_stop."""
    stack, _ = client
    status, headers, data = await post(stack.url + "/v1/messages", {**body(), "stream": True})
    assert status == 200
    assert headers["Content-Type"].startswith("text/event-stream")
    events = sse_events(data)
    names = [name for name, _ in events]
    assert names.count("message_start") == 1
    assert names.count("message_delta") == 1
    assert names[-1] == "message_stop"
    assert names.count("message_stop") == 1
    starts = [(e["index"], e["content_block"]["type"]) for n, e in events
              if n == "content_block_start"]
    assert starts == [(0, "thinking"), (1, "text")]
    stops = [e["index"] for n, e in events if n == "content_block_stop"]
    assert stops == [0, 1]
    signature = [e["delta"]["signature"] for n, e in events
                 if n == "content_block_delta" and e["delta"]["type"] == "signature_delta"]
    assert len(signature) == 1
    assert signature[0].startswith(MARK_PREFIX)
    assert len(signature[0]) == 32
    text = "".join(e["delta"].get("text", "") for n, e in events if n == "content_block_delta")
    assert text.strip() == ANSWER
    (delta,) = [e for n, e in events if n == "message_delta"]
    assert delta["delta"]["stop_reason"] == "end_turn"
    thinking = sum(1 for n, e in events
                   if n == "content_block_delta" and e["delta"]["type"] == "thinking_delta")
    assert delta["usage"]["output_tokens"] >= thinking + 9
    assert [c for c in comments(data) if c.startswith(b": runaway")]
    assert stack.metric("runaway_sidecar_requests_total", route="messages", model="sim-loop",
                        outcome="reissued") == 1
    assert stack.metric("runaway_sidecar_runaways_total", model="sim-loop",
                        detector="periodic", channel="thinking", mode="enforce") == 1
    assert await idle(stack)


@pytest.mark.parametrize("model", ["sim-loop", "sim-paraphrase-loop", "sim-stall"])
async def test_the_sdk_stream_helper_gets_the_answer(
        client: tuple[Stack, AsyncAnthropic], model: str) -> None:
    """``messages.stream`` assembles one message: the cut thinking, then the answer."""
    _, anthropic = client
    async with anthropic.messages.stream(**body(model)) as stream:
        final = await stream.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert text_of(final).strip()
    if model == "sim-loop":
        assert text_of(final).strip() == ANSWER
    assert final.stop_reason == "end_turn"


async def test_a_non_streaming_loop_gets_the_answer_and_headers(
        client: tuple[Stack, AsyncAnthropic]) -> None:
    """``messages.create`` without streaming gets vLLM's body with the reissued answer
    and the X-Runaway headers; usage counts both attempts."""
    stack, anthropic = client
    raw = await anthropic.messages.with_raw_response.create(**body())
    message = await raw.parse()
    assert raw.headers["X-Runaway-Detector"] == "periodic"
    assert raw.headers["X-Runaway-Action"] == "reissue"
    assert raw.headers["X-Runaway-Attempts"] == "2"
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].signature.startswith(MARK_PREFIX)  # type: ignore[union-attr]
    assert text_of(message).strip() == ANSWER
    assert message.usage.output_tokens > 100  # the cut attempt (~160 tokens) and the answer
    assert await idle(stack)


async def test_a_leaky_model_runs_the_ladder_out(client: tuple[Stack, AsyncAnthropic]) -> None:
    """With thinking off the leaky model loops in its text too: cut again, the ladder is
    over, the message ends with stop_reason max_tokens and both blocks closed."""
    stack, anthropic = client
    message = await anthropic.messages.create(**body("sim-leaky"))
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.stop_reason == "max_tokens"
    assert stack.metric("runaway_sidecar_requests_total", route="messages", model="sim-leaky",
                        outcome="exhausted") == 1
    _status, _, data = await post(stack.url + "/v1/messages",
                                 {**body("sim-leaky", messages=[
                                     {"role": "user", "content": "other"}]), "stream": True})
    events = sse_events(data)
    assert [n for n, _ in events].count("message_stop") == 1
    assert [e["index"] for n, e in events if n == "content_block_stop"] == [0, 1]


async def test_a_healthy_stream_is_forwarded_unchanged(
        client: tuple[Stack, AsyncAnthropic]) -> None:
    """A healthy stream through the sidecar is the upstream's, byte for byte (the
    simulator draws ids and signatures afresh, so both are compared without them)."""
    stack, _ = client
    request = {**body("sim-healthy"), "stream": True}
    _, _, direct = await post(stack.sim_url + "/v1/messages", request)
    _, _, proxied = await post(stack.url + "/v1/messages", request)

    def normalized(data: bytes) -> list[tuple[str, Any]]:
        out = []
        for name, event in sse_events(data):
            if name == "message_start":
                event["message"]["id"] = "x"
            if event.get("delta", {}).get("type") == "signature_delta":
                event["delta"]["signature"] = "x"
            out.append((name, event))
        return out

    assert normalized(proxied) == normalized(direct)
    assert len(proxied) == len(direct)
    assert not comments(proxied)


async def test_cut_shadow_and_off_modes(client: tuple[Stack, AsyncAnthropic]) -> None:
    """cut: the message ends at the cut with stop_reason max_tokens; shadow: the loop
    runs on unchanged; off: a plain proxy."""
    stack, _ = client
    request = {**body(max_tokens=600), "stream": True}
    _, _, cut = await post(stack.url + "/v1/messages", request, {"X-Runaway-Mode": "cut"})
    events = sse_events(cut)
    assert [n for n, _ in events][-2:] == ["message_delta", "message_stop"]
    assert events[-2][1]["delta"]["stop_reason"] == "max_tokens"
    assert b"action=cut" in cut
    _, _, shadow = await post(stack.url + "/v1/messages",
                              {**request, "messages": [{"role": "user", "content": "s"}]},
                              {"X-Runaway-Mode": "shadow"})
    assert not comments(shadow)
    assert sse_events(shadow)[-2][1]["delta"]["stop_reason"] == "max_tokens"
    assert stack.metric("runaway_sidecar_requests_total", route="messages", model="sim-loop",
                        outcome="shadow") == 1
    _, _, off = await post(stack.url + "/v1/messages",
                           {**request, "messages": [{"role": "user", "content": "o"}]},
                           {"X-Runaway-Mode": "off"})
    assert not comments(off)


async def test_the_thinking_budget_applies(client: tuple[Stack, AsyncAnthropic]) -> None:
    """X-Thinking-Budget cuts a long thinking at the budget; thinking.budget_tokens is
    the sidecar's own thinking budget too."""
    _stack, anthropic = client
    raw = await anthropic.messages.with_raw_response.create(
        **body("sim-long-thinking"), extra_headers={"X-Thinking-Budget": "50"})
    assert raw.headers["X-Runaway-Detector"] == "thinking_token_budget"
    assert (await raw.parse()).content[-1].type == "text"
    raw = await anthropic.messages.with_raw_response.create(
        **body("sim-long-thinking", messages=[{"role": "user", "content": "b"}],
               max_tokens=2000), thinking={"type": "enabled", "budget_tokens": 1024})
    assert raw.headers["X-Runaway-Detector"] == "thinking_token_budget"


async def test_the_history_of_a_cut_turn_is_cleaned(make_stack: StackFactory,
                                                    log_output: io.StringIO) -> None:  # noqa: F811
    """A later request that sends the cut thinking block back (with the sidecar's
    signature) reaches the node with a short note instead of the looped text, logged
    under the request's id; thinking blocks with other signatures are left alone."""
    stack = await make_stack(tap=True)
    assert stack.tap is not None
    anthropic = AsyncAnthropic(base_url=stack.url, api_key="k", max_retries=0)
    first = await anthropic.messages.create(**body())
    cut = first.content[0]
    assert cut.type == "thinking"
    looped = cut.thinking
    history = [*MESSAGES, {"role": "assistant", "content": [
        {"type": "thinking", "thinking": looped, "signature": cut.signature},
        {"type": "text", "text": text_of(first)}]},
        {"role": "user", "content": "Thanks. Anything else?"}]
    await anthropic.messages.create(**body("sim-healthy", messages=history, max_tokens=50))
    sent = orjson.loads(stack.tap.bodies[-1])
    assert sent["messages"][1]["content"][0] == {
        "type": "thinking", "thinking": CUT_NOTE, "signature": cut.signature}
    assert sent["messages"][1]["content"][1]["text"] == text_of(first)
    assert stack.metric("runaway_sidecar_history_cleaned_total", route="messages") == 1
    (cleaned,) = events(log_output, "history_cleaned")
    assert cleaned["request_id"] == events(log_output, "access")[-1]["request_id"] != ""
    other = [history[0], {"role": "assistant", "content": [
        {"type": "thinking", "thinking": looped, "signature": "0" * 32}]}, history[2]]
    await anthropic.messages.create(**body("sim-healthy", messages=other, max_tokens=50))
    assert orjson.loads(stack.tap.bodies[-1])["messages"][1]["content"][0]["thinking"] == looped
    assert stack.metric("runaway_sidecar_history_cleaned_total", route="messages") == 1
    await anthropic.close()


async def test_count_tokens_and_errors(client: tuple[Stack, AsyncAnthropic]) -> None:
    """count_tokens passes through; the node's errors reach the client as they came; the
    sidecar's own errors have Anthropic's shape."""
    stack, anthropic = client
    request = body("sim-healthy")
    assert (await post(stack.url + "/v1/messages/count_tokens", request))[2] == (
        await post(stack.sim_url + "/v1/messages/count_tokens", request))[2]
    with pytest.raises(NotFoundError):
        await anthropic.messages.create(**body("no-such-model"))
    with pytest.raises(BadRequestError) as bad:
        await anthropic.messages.create(**body(), extra_headers={"X-Runaway-Mode": "loud"})
    assert bad.value.body == {"type": "error", "error": {
        "type": "invalid_request_error",
        "message": "X-Runaway-Mode must be one of enforce, cut, shadow, off"}}


async def test_a_disconnect_stops_generation(client: tuple[Stack, AsyncAnthropic]) -> None:
    """A client that leaves mid-stream, in the first attempt or in the reissue, leaves
    the node idle."""
    stack, _ = client
    for model, until in (("sim-loop", b"thinking_delta"), ("sim-leaky", b": runaway")):
        async with aiohttp.ClientSession() as session:
            resp = await session.post(stack.url + "/v1/messages", json={
                **body(model, messages=[{"role": "user", "content": model}]), "stream": True})
            seen = b""
            while until not in seen:
                seen += await resp.content.readany()
            resp.close()
        deadline = time.monotonic() + 2
        while not await idle(stack):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
    assert stack.metric("runaway_sidecar_client_disconnects_total", route="messages") == 2


async def test_the_policy_reads_the_top_level_system(make_stack: StackFactory) -> None:
    """A policy rule on the system prompt matches Anthropic's top-level ``system``."""
    from sidecar.config import PolicyConfig, PolicyRule

    rule = PolicyRule(name="terse", system="^Be terse", thinking="off")
    stack = await make_stack(policy=PolicyConfig(rules=(rule,)))
    await post(stack.url + "/v1/messages", body("sim-healthy", system="Be terse."))
    assert await stack.sim_metric("sim:requests_total", thinking="off") == 1
    assert stack.metric("runaway_sidecar_policy_decisions_total", rule="terse") == 1
