"""llama.cpp, SGLang and Ollama behind the sidecar on their OpenAI-compatible routes,
driven by the official ``openai`` SDK against the simulator in each dialect.

The simulator's bytes follow ``docs/protocols.md`` §7-9. Unverified there (⚠) and so
only as good as the document: llama.cpp's ``timings`` content, SGLang's finish and usage
chunk shapes, and whether Ollama's OpenAI layer sends ``[DONE]`` after an error.
"""

from __future__ import annotations

import aiohttp
import orjson
import pytest
from openai import AsyncOpenAI

from tests.dialects.conftest import DialectStack
from tests.stack import Stack

OPENAI_DIALECTS = ("llamacpp", "sglang", "ollama")
REASONING_KEY = {"llamacpp": "reasoning_content", "sglang": "reasoning_content",
                 "ollama": "reasoning"}
LOOP_BODY: dict[str, object] = {
    "model": "sim-loop", "max_tokens": 4000,
    "messages": [{"role": "user", "content": "Fix the bug in my parser"}],
}
# The passthrough probe per server: an endpoint the sidecar does not watch.
UNWATCHED = {"llamacpp": "/props", "sglang": "/get_model_info", "ollama": "/api/version",
             "vllm": "/version"}


def client(stack: Stack) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=stack.url + "/v1", api_key="k", max_retries=0)


async def sdk_stream(stack: Stack, key: str) -> tuple[str, str, list[str], set[str]]:
    """Reasoning (under the server's own key), content, finish reasons and ids."""
    sdk = client(stack)
    stream = await sdk.chat.completions.create(**{**LOOP_BODY, "stream": True})  # type: ignore[call-overload]
    reasoning, content, finishes, ids = [], [], [], set()
    async for chunk in stream:
        ids.add(chunk.id)
        for choice in chunk.choices:
            delta = choice.delta.model_dump()
            reasoning.append(delta.get(key) or "")
            content.append(delta.get("content") or "")
            if choice.finish_reason:
                finishes.append(choice.finish_reason)
    await sdk.close()
    return "".join(reasoning), "".join(content), finishes, ids


@pytest.mark.parametrize("dialect", OPENAI_DIALECTS)
async def test_stream_loop_is_cut_and_answered(dialect_stack: DialectStack, dialect: str) -> None:
    """A thinking loop is cut, reissued with that server's thinking-off switch, and the
    answer is spliced into the same stream the SDK reads."""
    stack = await dialect_stack(dialect)
    reasoning, content, finishes, ids = await sdk_stream(stack, REASONING_KEY[dialect])
    assert "Hmm, maybe my earlier reasoning" in reasoning
    assert content.strip() == "Fix: guard empty lists before indexing!"
    assert finishes == ["stop"]
    assert len(ids) == 1
    assert await stack.sim_metric("sim:requests_total", thinking="on") == 1
    assert await stack.sim_metric("sim:requests_total", thinking="off") == 1
    assert await stack.sim_metric("vllm:num_requests_running") == 0
    assert stack.metric("runaway_sidecar_reissues_total", model="sim-loop",
                        step="thinking_off", outcome="ok") == 1


@pytest.mark.parametrize("dialect", OPENAI_DIALECTS)
async def test_non_streaming_loop_is_answered(dialect_stack: DialectStack, dialect: str) -> None:
    """A non-streaming request is watched as a stream and answered with one body."""
    stack = await dialect_stack(dialect)
    sdk = client(stack)
    resp = await sdk.chat.completions.with_raw_response.create(**LOOP_BODY)  # type: ignore[call-overload]
    completion = resp.parse()
    await sdk.close()
    assert resp.headers["X-Runaway-Action"] == "reissue"
    assert completion.choices[0].message.content.strip().startswith("Fix: guard empty lists")
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.completion_tokens > 8


@pytest.mark.parametrize("dialect", OPENAI_DIALECTS)
async def test_reissue_uses_the_servers_switch(dialect_stack: DialectStack, dialect: str) -> None:
    """Ollama gets reasoning_effort "none" (it ignores chat_template_kwargs); llama.cpp
    and SGLang get the Qwen family's chat_template_kwargs."""
    stack = await dialect_stack(dialect)
    rules = stack.proxy.config.reissue.rules
    patch = next(r.set for r in rules if r.match == ".*" or "qwen3" in r.match)
    if dialect == "ollama":
        assert patch == {"reasoning_effort": "none"}
    else:
        assert patch == {"chat_template_kwargs": {"enable_thinking": False}}


@pytest.mark.parametrize("dialect", [*OPENAI_DIALECTS, "vllm"])
async def test_unwatched_endpoint_passes_through(dialect_stack: DialectStack,
                                                 dialect: str) -> None:
    """The server's own endpoints and /v1/models pass through byte for byte."""
    stack = await dialect_stack(dialect)
    path = UNWATCHED[dialect]
    async with aiohttp.ClientSession() as s:
        async with s.get(stack.sim_url + path) as r:
            direct = await r.read()
        async with s.get(stack.url + path) as r:
            assert r.status == 200
            assert await r.read() == direct
    sdk = client(stack)
    models = [m.id async for m in sdk.models.list()]
    await sdk.close()
    assert "sim-loop" in models


@pytest.mark.parametrize("stream", [False, True])
async def test_llamacpp_bills_every_choice_of_a_reissue(dialect_stack: DialectStack,
                                                        stream: bool) -> None:
    """llama.cpp ends each of ``n`` choices with its own usage chunk: a reissue's usage
    counts every choice, and the tokens billed are vLLM's for the same exchange."""
    body = {**LOOP_BODY, "n": 2, "stream": stream,
            **({"stream_options": {"include_usage": True}} if stream else {})}
    billed = []
    for dialect in ("vllm", "llamacpp"):
        stack = await dialect_stack(dialect)
        async with aiohttp.ClientSession() as s, s.post(
                stack.url + "/v1/chat/completions", json=body) as r:
            data = await r.read()
        if stream:
            usages = [orjson.loads(e[6:])["usage"] for e in data.split(b"\n\n")
                      if e.startswith(b"data: {") and b'"usage"' in e]
            billed.append(usages[-1]["completion_tokens"])
        else:
            billed.append(orjson.loads(data)["usage"]["completion_tokens"])
    vllm, llamacpp = billed
    assert llamacpp == vllm


async def test_llamacpp_error_without_done_is_not_a_truncation(
        dialect_stack: DialectStack) -> None:
    """llama.cpp ends a failed stream after the error event, with no [DONE]: the client
    gets that error event as sent, not a second "truncated stream" error."""
    stack = await dialect_stack("llamacpp")
    headers = {"X-Sim-Fault": "error-mid-stream", "X-Sim-Fault-After": "3"}
    body = {"model": "sim-healthy", "max_tokens": 50, "stream": True,
            "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as s, s.post(
            stack.url + "/v1/chat/completions", json=body, headers=headers) as r:
        assert r.status == 200
        data = await r.read()
    events = [e for e in data.split(b"\n\n") if e]
    assert b"[DONE]" not in data
    assert orjson.loads(events[-1][6:])["error"]["type"] == "server_error"
    assert sum(b'"error"' in e for e in events) == 1
    assert stack.metric("runaway_sidecar_upstream_errors_total", kind="reset") == 0


@pytest.mark.parametrize("dialect", OPENAI_DIALECTS)
async def test_first_deltas_of_each_server_are_accepted(dialect_stack: DialectStack,
                                                        dialect: str) -> None:
    """A healthy answer passes unchanged: llama.cpp's content null role chunk, SGLang's
    reasoning_content null in every delta, Ollama's role inside the first delta."""
    stack = await dialect_stack(dialect)
    body = {"model": "sim-healthy", "max_tokens": 64, "stream": True,
            "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as s:
        async with s.post(stack.sim_url + "/v1/chat/completions", json=body) as r:
            direct = await r.read()
        async with s.post(stack.url + "/v1/chat/completions", json=body) as r:
            via = await r.read()

    def strip_ids(data: bytes) -> list[dict[str, object]]:
        out = []
        for event in data.split(b"\n\n"):
            if event.startswith(b"data: {"):
                obj = orjson.loads(event[6:])
                obj.pop("id"), obj.pop("created")
                out.append(obj)
        return out

    assert strip_ids(via) == strip_ids(direct)
    assert via.endswith(b"data: [DONE]\n\n")


async def test_llamacpp_watched_body_is_the_servers_own(dialect_stack: DialectStack) -> None:
    """A healthy non-streaming answer, watched as a stream, comes back in llama-server's
    own body layout: the same bytes as the server's direct answer once the id (drawn per
    response) is blanked. (The simulator's layout is held to a real llama-server's by
    tests/simulator/test_llamacpp_captures.py.)"""
    stack = await dialect_stack("llamacpp")
    body = {"model": "sim-healthy", "max_tokens": 64,
            "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as s:
        async with s.post(stack.sim_url + "/v1/chat/completions", json=body) as r:
            direct = orjson.loads(await r.read())
        async with s.post(stack.url + "/v1/chat/completions", json=body) as r:
            assert r.status == 200
            proxied = orjson.loads(await r.read())
    assert list(proxied) == list(direct)
    assert list(direct) == ["choices", "created", "model", "system_fingerprint", "object",
                            "usage", "id", "timings"]
    proxied["id"], proxied["created"] = direct["id"], direct["created"]
    assert proxied == direct
