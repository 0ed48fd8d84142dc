"""The exchange runner (``sidecar.net.runner``): cut and reissue through the proxy, against
the simulated node, in every mode."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time

import aiohttp
import orjson
import pytest
from openai import AsyncOpenAI

from sidecar.config import ReissueConfig, ThinkingOffRule
from tests.stack import Stack, StackFactory

LOOP_BODY: dict[str, object] = {
    "model": "sim-loop", "max_tokens": 8000,
    "messages": [{"role": "user", "content": "Fix the bug in my parser"}],
}


async def raw_stream(url: str, body: dict[str, object],
                     headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    async with aiohttp.ClientSession() as s, s.post(
        url + "/v1/chat/completions", json={**body, "stream": True}, headers=headers or {}
    ) as r:
        return r.status, dict(r.headers), await r.read()


def payloads(data: bytes) -> list[dict[str, object]]:
    return [orjson.loads(e[6:]) for e in data.split(b"\n\n") if e.startswith(b"data: {")]


async def sdk_stream(stack: Stack, **kw: object) -> tuple[str, str, list[str], set[str]]:
    """Reasoning, content, finish reasons and ids seen by the official SDK."""
    client = AsyncOpenAI(base_url=stack.url + "/v1", api_key="k", max_retries=0)
    stream = await client.chat.completions.create(**{**LOOP_BODY, **kw, "stream": True})  # type: ignore[call-overload]
    reasoning, content, finishes, ids = [], [], [], set()
    async for chunk in stream:
        ids.add(chunk.id)
        for choice in chunk.choices:
            delta = choice.delta.model_dump()
            reasoning.append(delta.get("reasoning") or "")
            content.append(delta.get("content") or "")
            if choice.finish_reason:
                finishes.append(choice.finish_reason)
    await client.close()
    return "".join(reasoning), "".join(content), finishes, ids


async def test_enforce_streaming_splices_answer(make_stack: StackFactory) -> None:
    """A thinking loop is cut and the thinking-off answer follows in the same stream."""
    stack = await make_stack()
    reasoning, content, finishes, ids = await sdk_stream(stack)
    assert "Hmm, maybe my earlier reasoning" in reasoning
    assert content.strip().startswith("Fix: guard empty lists")
    assert finishes == ["stop"]
    assert len(ids) == 1
    assert await stack.sim_metric("sim:requests_total", thinking="off") == 1
    assert stack.metric("runaway_sidecar_runaways_total", model="sim-loop",
                        detector="recurrence", channel="thinking", mode="enforce") + stack.metric(
        "runaway_sidecar_runaways_total", model="sim-loop", detector="periodic",
        channel="thinking", mode="enforce") == 1
    assert stack.metric("runaway_sidecar_reissues_total", model="sim-loop",
                        step="thinking_off", outcome="ok") == 1
    assert await stack.sim_metric("vllm:num_requests_running") == 0


async def test_stream_wire_shape_after_splice(make_stack: StackFactory) -> None:
    """One comment line records the cut; no second role chunk; usage sums both attempts."""
    stack = await make_stack()
    status, _, data = await raw_stream(stack.url, {**LOOP_BODY,
                                                   "stream_options": {"include_usage": True}})
    assert status == 200
    comments = [e for e in data.split(b"\n\n") if e.startswith(b":")]
    assert len(comments) == 1
    assert b"action=reissue:no-think" in comments[0]
    chunks = payloads(data)
    roles = [c for c in chunks for ch in c["choices"]  # type: ignore[attr-defined]
             if "role" in ch["delta"]]
    assert len(roles) == 1
    usage = chunks[-1]["usage"]
    assert isinstance(usage, dict)
    reasoning_chunks = sum(1 for c in chunks for ch in c["choices"]  # type: ignore[attr-defined]
                           if ch["delta"].get("reasoning"))
    assert usage["completion_tokens"] > reasoning_chunks
    assert usage["completion_tokens_details"]["reasoning_tokens"] >= reasoning_chunks
    assert data.endswith(b"data: [DONE]\n\n")


async def test_enforce_nonstreaming(make_stack: StackFactory) -> None:
    """A non-streaming client gets the reissued answer and the X-Runaway headers."""
    stack = await make_stack()
    async with aiohttp.ClientSession() as s, s.post(
        stack.url + "/v1/chat/completions", json=LOOP_BODY
    ) as r:
        body = await r.json()
        headers = r.headers
    assert r.status == 200
    assert headers["X-Runaway-Action"] == "reissue"
    assert headers["X-Runaway-Attempts"] == "2"
    assert headers["X-Runaway-Detector"] in ("recurrence", "periodic")
    message = body["choices"][0]["message"]
    assert message["content"].strip().startswith("Fix:")
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["object"] == "chat.completion"


async def test_cut_mode_ends_cleanly(make_stack: StackFactory) -> None:
    """``cut`` ends the stream with finish_reason length and sends no reissue."""
    stack = await make_stack()
    reasoning, content, finishes, _ = await sdk_stream(
        stack, extra_headers={"X-Runaway-Mode": "cut"})
    assert reasoning
    assert content == ""
    assert finishes == ["length"]
    assert await stack.sim_metric("sim:requests_total", thinking="off") == 0
    assert stack.metric("runaway_sidecar_requests_total", route="chat", outcome="cut",
                        model="sim-loop") == 1


@pytest.mark.parametrize("stream", [False, True])
async def test_cut_mode_bills_the_prompt(make_stack: StackFactory, stream: bool) -> None:
    """Every attempt cut before the upstream reported usage: the prompt is still billed,
    estimated from the request's size (one token per four bytes)."""
    stack = await make_stack()
    body = orjson.dumps({**LOOP_BODY, "stream": stream,
                         **({"stream_options": {"include_usage": True}} if stream else {})})
    async with aiohttp.ClientSession() as s, s.post(
            stack.url + "/v1/chat/completions", data=body,
            headers={"X-Runaway-Mode": "cut", "Content-Type": "application/json"}) as r:
        data = await r.read()
    usage = (payloads(data)[-1] if stream else orjson.loads(data))["usage"]
    assert isinstance(usage, dict)
    assert usage["prompt_tokens"] == len(body) // 4
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


async def test_shadow_mode_changes_nothing(make_stack: StackFactory) -> None:
    """``shadow`` detects and counts, but the client gets vLLM's bytes to the end."""
    stack = await make_stack()
    body = {**LOOP_BODY, "max_tokens": 1500}
    _, _, direct = await raw_stream(stack.sim_url, body)
    _, _, shadowed = await raw_stream(stack.url, body, {"X-Runaway-Mode": "shadow"})
    assert len(payloads(shadowed)) == len(payloads(direct))
    assert b": runaway" not in shadowed
    assert stack.metric("runaway_sidecar_shadow_detections_total", model="sim-loop",
                        detector="recurrence", channel="thinking") + stack.metric(
        "runaway_sidecar_shadow_detections_total", model="sim-loop", detector="periodic",
        channel="thinking") == 1


async def test_off_mode_and_bad_mode_header(make_stack: StackFactory) -> None:
    """``off`` is pure pass-through; an unknown mode header is a 400."""
    stack = await make_stack()
    _, _, data = await raw_stream(stack.url, {**LOOP_BODY, "max_tokens": 600},
                                  {"X-Runaway-Mode": "off"})
    assert len(payloads(data)) == 600  # the role chunk, then 599 tokens (<think> is not sent)
    status, _, body = await raw_stream(stack.url, LOOP_BODY, {"X-Runaway-Mode": "loud"})
    assert status == 400
    assert b"X-Runaway-Mode" in body


async def test_leaky_model_walks_ladder_and_ends(make_stack: StackFactory) -> None:
    """A model that loops in content with thinking off ends with finish_reason length."""
    stack = await make_stack()
    reasoning, content, finishes, ids = await sdk_stream(stack, model="sim-leaky")
    assert reasoning
    assert content.strip().startswith("Fix:")
    assert finishes == ["length"]
    assert len(ids) == 1
    assert stack.metric("runaway_sidecar_ladder_exhausted_total", model="sim-leaky") == 1


async def test_n2_both_choices_answered(make_stack: StackFactory) -> None:
    """With n=2 both looping choices are cut and each gets a reissued answer."""
    stack = await make_stack()
    client = AsyncOpenAI(base_url=stack.url + "/v1", api_key="k", max_retries=0)
    stream = await client.chat.completions.create(**{**LOOP_BODY, "n": 2, "stream": True})  # type: ignore[call-overload]
    content: dict[int, str] = {0: "", 1: ""}
    finishes: dict[int, str] = {}
    async for chunk in stream:
        for choice in chunk.choices:
            content[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
    await client.close()
    assert finishes == {0: "stop", 1: "stop"}
    assert all(c.strip().startswith("Fix:") for c in content.values())


async def test_runaway_memory_sends_retry_straight_to_thinking_off(
        make_stack: StackFactory) -> None:
    """The same prompt retried after a runaway goes to thinking off without a cut."""
    stack = await make_stack()
    await sdk_stream(stack)
    await sdk_stream(stack)
    assert await stack.sim_metric("sim:requests_total", thinking="on") == 1
    assert await stack.sim_metric("sim:requests_total", thinking="off") == 2


async def test_client_disconnect_stops_generation(make_stack: StackFactory) -> None:
    """Closing the client connection stops the node's generation within 500 ms."""
    stack = await make_stack(tokens_per_second=200)
    body = {**LOOP_BODY, "model": "sim-healthy", "stream": True}
    session = aiohttp.ClientSession()
    resp = await session.post(stack.url + "/v1/chat/completions", json=body)
    await resp.content.readany()
    assert await stack.sim_metric("vllm:num_requests_running") == 1
    resp.close()
    await session.close()
    closed = time.monotonic()
    while await stack.sim_metric("vllm:num_requests_running") != 0:
        assert time.monotonic() - closed < 0.5
        await asyncio.sleep(0.02)
    tokens = await stack.sim_metric("vllm:generation_tokens_total")
    await asyncio.sleep(0.2)
    assert await stack.sim_metric("vllm:generation_tokens_total") == tokens
    assert await stack.sim_metric("vllm:request_success_total") == 0
    assert await stack.sim_metric("sim:disconnected_requests_total") == 1


async def test_cut_frees_the_node(make_stack: StackFactory) -> None:
    """After a cut the node runs nothing and generated only the cut attempt plus the answer."""
    stack = await make_stack(tokens_per_second=400)
    _, _, data = await raw_stream(stack.url, LOOP_BODY)
    assert b"Fix" in data
    await asyncio.sleep(0.1)
    assert await stack.sim_metric("vllm:num_requests_running") == 0
    generated = await stack.sim_metric("vllm:generation_tokens_total")
    assert generated < 2000
    await asyncio.sleep(0.2)
    assert await stack.sim_metric("vllm:generation_tokens_total") == generated


@pytest.mark.parametrize("stream", [True, False])
async def test_thinking_budget_header(make_stack: StackFactory, stream: bool) -> None:
    """``X-Thinking-Budget`` cuts a long but healthy thinking stream at the budget."""
    stack = await make_stack()
    body = {**LOOP_BODY, "model": "sim-long-thinking", "stream": stream}
    async with aiohttp.ClientSession() as s, s.post(
        stack.url + "/v1/chat/completions", json=body, headers={"X-Thinking-Budget": "300"}
    ) as r:
        data = await r.read()
    assert r.status == 200
    if stream:
        assert b"detector=thinking_token_budget" in data
    else:
        assert r.headers["X-Runaway-Detector"] == "thinking_token_budget"


async def test_salvage_step_moves_continuation_to_content(make_stack: StackFactory) -> None:
    """The salvage step continues from the useful reasoning; vLLM labels the continuation
    as reasoning, and the sidecar delivers it as content."""
    from sidecar.config import ReissueConfig

    stack = await make_stack(reissue=ReissueConfig(ladder=("salvage",)))
    reasoning, content, finishes, ids = await sdk_stream(stack)
    assert reasoning
    assert content.strip()
    assert finishes == ["stop"]
    assert len(ids) == 1
    assert stack.metric("runaway_sidecar_reissues_total", model="sim-loop", step="salvage",
                        outcome="ok") == 1


async def test_salvage_reissue_carries_the_cut_reasoning(make_stack: StackFactory) -> None:
    """With salvage in the ladder the cut attempt keeps its reasoning, and the salvage
    request sends it back: the node's prompt counter grows by the 100 reasoning tokens cut
    by the budget (26 prompt tokens without them)."""
    from sidecar.config import ReissueConfig

    stack = await make_stack(reissue=ReissueConfig(ladder=("salvage",)))
    async with aiohttp.ClientSession() as session, session.post(
        stack.url + "/v1/chat/completions", headers={"X-Thinking-Budget": "100"},
        json={"model": "sim-long-thinking", "stream": True, "max_tokens": 4000,
              "messages": [{"role": "user", "content": "fix the bug"}]},
    ) as resp:
        assert resp.status == 200
        assert b"data: [DONE]" in await resp.read()
    assert stack.metric("runaway_sidecar_reissues_total", model="sim-long-thinking",
                        step="salvage", outcome="ok") == 1
    assert await stack.sim_metric("vllm:prompt_tokens_total") >= 100


async def test_tool_request_reissued_with_tools(make_stack: StackFactory) -> None:
    """A request with tools is reissued with its tools and still answers."""
    stack = await make_stack()
    tools = [{"type": "function", "function": {"name": "run_tests", "parameters": {
        "type": "object", "properties": {}}}}]
    reasoning, content, finishes, _ = await sdk_stream(stack, tools=tools)
    assert reasoning
    assert content.strip().startswith("Fix:")
    assert finishes == ["stop"]


async def test_upstream_failing_during_reissue(make_stack: StackFactory) -> None:
    """If the upstream refuses the reissue (404 for an unknown fallback model), the stream
    ends with an error event and [DONE], the reissue counts as ``rejected`` (what the
    ReissuesFailing alert's runbook reads as a thinking-off rule that does not fit) and the
    request as ``upstream_error``: the client got an error, not an answer."""
    from sidecar.config import ReissueConfig

    stack = await make_stack(reissue=ReissueConfig(ladder=("fallback:no-such-model",)))
    status, _, data = await raw_stream(stack.url, LOOP_BODY)
    assert status == 200
    assert b"action=reissue:fallback:no-such-model" in data
    errors = [orjson.loads(e[6:]) for e in data.split(b"\n\n") if e.startswith(b'data: {"error"')]
    assert len(errors) == 1
    assert data.endswith(b"data: [DONE]\n\n")
    assert stack.metric("runaway_sidecar_reissues_total", model="sim-loop",
                        step="fallback_model", outcome="rejected") == 1
    assert stack.metric("runaway_sidecar_reissues_total", model="sim-loop",
                        step="fallback_model", outcome="upstream_error") == 0
    assert stack.metric("runaway_sidecar_requests_total", route="chat", model="sim-loop",
                        outcome="upstream_error") == 1


async def test_client_disconnect_during_reissue(make_stack: StackFactory) -> None:
    """A client that leaves during the reissue stops the reissued generation too."""
    stack = await make_stack(tokens_per_second=300)
    session = aiohttp.ClientSession()
    resp = await session.post(stack.url + "/v1/chat/completions",
                              json={**LOOP_BODY, "model": "sim-leaky", "stream": True})
    seen = b""
    while b": runaway" not in seen:
        seen += await resp.content.readany()
    await resp.content.readany()
    resp.close()
    await session.close()
    closed = time.monotonic()
    while await stack.sim_metric("vllm:num_requests_running") != 0:
        assert time.monotonic() - closed < 0.5
        await asyncio.sleep(0.02)
    assert stack.metric("runaway_sidecar_client_disconnects_total", route="chat") == 1
    assert stack.metric("runaway_sidecar_reissues_total", model="sim-leaky",
                        step="thinking_off", outcome="client_disconnect") == 1


async def test_a_reload_mid_exchange_leaves_the_exchange_as_it_started(
        make_stack: StackFactory) -> None:
    """A config reload while a stream is open applies to requests that start after it:
    the open exchange still reissues with the thinking-off rules it started with, while
    the next request runs in the reloaded mode."""
    stack = await make_stack(tokens_per_second=300)
    session = aiohttp.ClientSession()
    resp = await session.post(stack.url + "/v1/chat/completions",
                              json={**LOOP_BODY, "stream": True})
    first = await resp.content.readany()
    assert first.startswith(b"data: ")
    reloaded = dataclasses.replace(
        stack.proxy.config, mode="shadow",
        reissue=ReissueConfig(rules=(ThinkingOffRule(".*", {"seed": 1}),)))
    stack.proxy.reconfigure(reloaded)  # these rules would leave thinking on: a second loop
    rest = await resp.read()
    resp.close()
    await session.close()
    assert b"action=reissue:no-think" in rest
    content = "".join(str(c["choices"][0]["delta"].get("content") or "")  # type: ignore[index]
                      for c in payloads(rest) if c.get("choices"))
    assert content.strip() == "Fix: guard empty lists before indexing!"
    assert stack.metric("runaway_sidecar_reissues_total", model="sim-loop",
                        step="thinking_off", outcome="ok") == 1
    status, _, data = await raw_stream(stack.url, {**LOOP_BODY, "max_tokens": 600})
    assert status == 200
    assert b": runaway" not in data  # shadow: detected, not cut
    assert stack.metric("runaway_sidecar_requests_total", route="chat", model="sim-loop",
                        outcome="shadow") == 1


@pytest.mark.parametrize("stream", [True, False])
async def test_include_reasoning_false_is_still_watched(make_stack: StackFactory,
                                                        stream: bool) -> None:
    """With include_reasoning=false the sidecar still sees the thinking loop (it asks for
    the reasoning upstream) and the client still gets none of it."""
    stack = await make_stack()
    body = {**LOOP_BODY, "stream": stream, "include_reasoning": False}
    async with aiohttp.ClientSession() as s, s.post(stack.url + "/v1/chat/completions",
                                                    json=body) as r:
        data = await r.read()
    assert r.status == 200
    assert b"Hmm" not in data
    assert b'"reasoning":"' not in data
    assert b" Fix" in data


async def test_include_reasoning_false_identical_when_healthy(make_stack: StackFactory) -> None:
    """A healthy include_reasoning=false stream through the sidecar matches vLLM's bytes."""
    stack = await make_stack()
    body = {"model": "sim-healthy", "stream": True, "max_tokens": 500, "include_reasoning": False,
            "messages": [{"role": "user", "content": "Say OK"}]}
    out = []
    for url in (stack.sim_url, stack.url):
        async with aiohttp.ClientSession() as s, s.post(url + "/v1/chat/completions",
                                                        json=body) as r:
            out.append(re.sub(rb'"(id|created)":("[^"]*"|\d+)', b"", await r.read()))
    assert out[0] == out[1]
