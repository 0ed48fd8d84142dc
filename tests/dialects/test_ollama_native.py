"""Ollama's native API (/api/chat, /api/generate) behind the sidecar, driven by the
official ``ollama`` Python client against the simulator in its Ollama dialect.

⚠ From ``docs/protocols.md`` §8 but not checked against a live Ollama: the bodies of
``/api/version`` and ``/api/tags``, the error wording, generate's ``context``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import aiohttp
import orjson
import pytest
from ollama import AsyncClient, ResponseError

from sidecar.config import DialectLadder, PolicyConfig, PolicyRule, ReissueConfig
from tests.dialects.conftest import DialectStack

MESSAGES = [{"role": "user", "content": "Fix the bug in my parser"}]
FIX = "Fix: guard empty lists before indexing!"
Clients = Callable[[str], AsyncClient]


@pytest.fixture
async def clients() -> AsyncIterator[Clients]:
    """Factory of official Ollama clients for a base URL, closed after the test."""
    made: list[AsyncClient] = []

    def make(host: str) -> AsyncClient:
        made.append(AsyncClient(host=host))
        return made[-1]

    yield make
    for client in made:
        await client.close()  # type: ignore[no-untyped-call]


async def test_chat_stream_loop_is_cut_and_answered(
        dialect_stack: DialectStack, clients: Clients) -> None:
    """A thinking loop in message.thinking is cut, reissued with think=false, and the
    client reads one NDJSON stream with one final done line and summed counters."""
    stack = await dialect_stack("ollama")
    client = clients(stack.url)
    thinking, content, done, models = [], [], [], set()
    async for part in await client.chat(model="sim-loop", messages=MESSAGES, stream=True,
                                        options={"num_predict": 4000}):
        thinking.append(part.message.thinking or "")
        content.append(part.message.content or "")
        models.add(part.model)
        if part.done:
            done.append(part)
    assert "Hmm, maybe my earlier reasoning" in "".join(thinking)
    assert "".join(content).strip() == FIX
    assert len(done) == 1
    assert done[0].done_reason == "stop"
    assert models == {"sim-loop"}
    # The reissue alone generated 9 tokens; the cut attempt's streamed tokens are added.
    assert done[0].eval_count is not None
    assert done[0].eval_count > 9 + 20
    assert await stack.sim_metric("sim:requests_total", thinking="off") == 1
    assert await stack.sim_metric("vllm:num_requests_running") == 0
    assert stack.metric("runaway_sidecar_reissues_total", model="sim-loop",
                        step="thinking_off", outcome="ok") == 1


async def test_chat_non_streaming_is_one_object(
        dialect_stack: DialectStack, clients: Clients) -> None:
    """"stream": false gets one JSON object with the spliced answer and X-Runaway headers."""
    stack = await dialect_stack("ollama")
    client = clients(stack.url)
    resp = await client.chat(model="sim-loop", messages=MESSAGES, stream=False,
                             options={"num_predict": 4000})
    assert resp.done is True
    assert resp.done_reason == "stop"
    assert (resp.message.content or "").strip() == FIX
    assert "Hmm, maybe" in (resp.message.thinking or "")
    body = {"model": "sim-loop", "messages": MESSAGES, "stream": False}
    async with aiohttp.ClientSession() as s, s.post(stack.url + "/api/chat", json=body) as r:
        assert r.headers["X-Runaway-Action"] == "reissue"
        assert r.headers["Content-Type"].startswith("application/json")
        obj = orjson.loads(await r.read())
    assert obj["message"]["content"].strip() == FIX


async def test_generate_stream_loop_is_cut_and_answered(
        dialect_stack: DialectStack, clients: Clients) -> None:
    """/api/generate: thinking in the top-level field is cut, the response is reissued."""
    stack = await dialect_stack("ollama")
    client = clients(stack.url)
    thinking, response, done = [], [], []
    async for part in await client.generate(model="sim-loop", prompt="Fix the bug",
                                            stream=True):
        thinking.append(part.thinking or "")
        response.append(part.response or "")
        if part.done:
            done.append(part)
    assert "Hmm, maybe" in "".join(thinking)
    assert "".join(response).strip() == FIX
    assert len(done) == 1
    assert done[0].prompt_eval_count is not None
    # The cut attempt's prompt is billed too: it never reported its own count.
    direct = await clients(stack.sim_url).generate(
        model="sim-healthy", prompt="Fix the bug", think=False, options={"num_predict": 1})
    assert direct.prompt_eval_count is not None
    assert done[0].prompt_eval_count == 2 * direct.prompt_eval_count


async def test_think_false_ignored_falls_back(
        dialect_stack: DialectStack, clients: Clients) -> None:
    """A model that keeps looping in content after think=false (sim-leaky) is cut again,
    and the Ollama ladder's fallback model answers."""
    stack = await dialect_stack("ollama", reissue=ReissueConfig(dialect_ladders=(
        DialectLadder("ollama", ("no-think", "fallback:sim-loop")),)))
    client = clients(stack.url)
    content, done = [], []
    async for part in await client.chat(model="sim-leaky", messages=MESSAGES, stream=True):
        content.append(part.message.content or "")
        if part.done:
            done.append(part)
    text = "".join(content)
    assert text.strip().endswith(FIX)
    assert text.count("Fix:") == 2  # the leaky answer, then the fallback's
    assert len(done) == 1
    assert done[0].model == "sim-leaky"
    assert stack.metric("runaway_sidecar_reissues_total", model="sim-leaky",
                        step="thinking_off", outcome="runaway") == 1
    assert stack.metric("runaway_sidecar_reissues_total", model="sim-leaky",
                        step="fallback_model", outcome="ok") == 1


async def test_unwatched_endpoints_pass_through(
        dialect_stack: DialectStack, clients: Clients) -> None:
    """/api/tags (client.list) and /api/version reach Ollama unchanged."""
    stack = await dialect_stack("ollama")
    listed = await clients(stack.url).list()
    assert "sim-loop" in {m.model for m in listed.models}
    async with aiohttp.ClientSession() as s, s.get(stack.url + "/api/version") as r:
        assert orjson.loads(await r.read()) == {"version": "0.33.0-rc2"}


async def test_unknown_model_error_is_relayed(
        dialect_stack: DialectStack, clients: Clients) -> None:
    """An error before output keeps Ollama's status and {"error": …} body."""
    stack = await dialect_stack("ollama")
    with pytest.raises(ResponseError) as info:
        await clients(stack.url).chat(model="nope", messages=MESSAGES)
    assert info.value.status_code == 404
    assert "not found" in info.value.error


async def test_error_line_mid_stream_reaches_client(
        dialect_stack: DialectStack, clients: Clients) -> None:
    """An error after output started arrives as Ollama's {"error": …} line."""
    stack = await dialect_stack("ollama")
    body = {"model": "sim-healthy", "messages": MESSAGES}
    headers = {"X-Sim-Fault": "error-mid-stream", "X-Sim-Fault-After": "3"}
    async with aiohttp.ClientSession() as s, s.post(stack.url + "/api/chat", json=body,
                                                    headers=headers) as r:
        lines = (await r.read()).splitlines()
    assert len(lines) == 4
    assert "error" in orjson.loads(lines[-1])
    assert all(orjson.loads(x)["done"] is False for x in lines[:3])


async def test_healthy_stream_is_forwarded_unchanged(
        dialect_stack: DialectStack, clients: Clients) -> None:
    """With no runaway the NDJSON lines are the upstream's, apart from timestamps."""
    stack = await dialect_stack("ollama")
    body = {"model": "sim-healthy", "messages": MESSAGES, "options": {"num_predict": 40}}
    async with aiohttp.ClientSession() as s:
        async with s.post(stack.sim_url + "/api/chat", json=body) as r:
            direct = [orjson.loads(x) for x in (await r.read()).splitlines()]
        async with s.post(stack.url + "/api/chat", json=body) as r:
            assert r.headers["Content-Type"] == "application/x-ndjson"
            via = [orjson.loads(x) for x in (await r.read()).splitlines()]
    volatile = ("created_at", "total_duration", "eval_duration")
    assert [{k: v for k, v in o.items() if k not in volatile} for o in via] == [
        {k: v for k, v in o.items() if k not in volatile} for o in direct]
    assert via[-1]["done"] is True
    assert sum(o["done"] for o in via) == 1


async def test_the_clients_think_beats_a_policy_rule(
        dialect_stack: DialectStack, clients: Clients) -> None:
    """``think: true`` from the client is the client's own switch on /api/chat: a policy
    rule that turns thinking off leaves it alone (the policy never overrides the client),
    while a request without ``think`` gets the rule's ``think: false``."""
    rule = PolicyRule(name="all-off", thinking="off")
    stack = await dialect_stack("ollama", policy=PolicyConfig(rules=(rule,)))
    client = clients(stack.url)
    await client.chat(model="sim-healthy", messages=MESSAGES, think=True, stream=False,
                      options={"num_predict": 200})
    assert await stack.sim_metric("sim:requests_total", thinking="on") == 1
    await client.chat(model="sim-healthy", messages=MESSAGES, stream=False,
                      options={"num_predict": 200})
    assert await stack.sim_metric("sim:requests_total", thinking="off") == 1
