"""The thinking policy in the proxy: presets, X-Thinking, adaptive budgets, /debug/policy."""

from __future__ import annotations

import aiohttp
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from sidecar.config import PolicyConfig
from sidecar.service.health import make_metrics_app
from sidecar.service.server import debug_policy_handler
from tests.stack import StackFactory

CODE = "Why does this crash?\n```python\nitems = []\nprint(items[0])\n```"


async def ask(url: str, text: str, model: str = "sim-healthy",
              headers: dict[str, str] | None = None, **extra: object) -> tuple[int, bytes]:
    body = {"model": model, "stream": True, "max_tokens": 2000,
            "messages": [{"role": "user", "content": text}], **extra}
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/chat/completions", json=body,
                                                    headers=headers or {}) as r:
        return r.status, await r.read()


async def test_coding_preset_turns_thinking_off(make_stack: StackFactory) -> None:
    """With coding-no-think, a request with a code block reaches vLLM with thinking off."""
    stack = await make_stack(policy=PolicyConfig(presets=("coding-no-think",)))
    status, data = await ask(stack.url, CODE)
    assert status == 200
    assert b'"reasoning"' not in data
    assert await stack.sim_metric("sim:requests_total", thinking="off") == 1
    assert stack.metric("runaway_sidecar_policy_decisions_total", rule="coding-no-think") == 1
    await ask(stack.url, "Tell me about rivers.")
    assert await stack.sim_metric("sim:requests_total", thinking="on") == 1


async def test_client_setting_beats_policy_and_header(make_stack: StackFactory) -> None:
    """An explicit enable_thinking from the client wins over the preset and X-Thinking."""
    stack = await make_stack(policy=PolicyConfig(presets=("coding-no-think",)))
    await ask(stack.url, CODE, headers={"X-Thinking": "off"},
              chat_template_kwargs={"enable_thinking": True})
    assert await stack.sim_metric("sim:requests_total", thinking="on") == 1
    await ask(stack.url, "Tell me about rivers.", headers={"X-Thinking": "off"})
    assert await stack.sim_metric("sim:requests_total", thinking="off") == 1
    status, body = await ask(stack.url, "x", headers={"X-Thinking": "sometimes"})
    assert status == 400
    assert b"X-Thinking" in body


async def test_adaptive_budget_learns_and_cuts(make_stack: StackFactory) -> None:
    """After enough healthy requests, thinking far past their p99 is cut by the budget."""
    stack = await make_stack(policy=PolicyConfig(adaptive_budget=True, adaptive_min_samples=3,
                                                 adaptive_multiple=1.5))
    for i in range(3):
        status, data = await ask(stack.url, f"healthy {i}", max_tokens=4000)
        assert b": runaway" not in data
    snapshot = stack.proxy.fleet.snapshot()["budgets"]
    budget = snapshot["sim-healthy|-"]["budget_tokens"]
    assert budget is not None
    status, data = await ask(stack.url, "think forever", model="sim-long-thinking",
                             max_tokens=8000)
    assert status == 200
    assert b"detector=thinking_token_budget" not in data  # another model: no samples yet
    # Budgets are per model and rule: samples for sim-long-thinking give it a budget too.
    for _ in range(3):
        stack.proxy.fleet.budgets.observe("sim-long-thinking|-", 100)
    status, data = await ask(stack.url, "think again", model="sim-long-thinking",
                             max_tokens=8000)
    assert status == 200
    assert b"detector=thinking_token_budget" in data


async def test_debug_policy_endpoint(make_stack: StackFactory) -> None:
    """/debug/policy shows the rules in order, presets and the current budgets."""
    stack = await make_stack(policy=PolicyConfig(presets=("math-think",), adaptive_budget=True))
    stack.proxy.fleet.budgets.observe("m|-", 10)
    app = make_metrics_app(CollectorRegistry(), stack.proxy.upstream_ready,
                           extra_routes=[aiohttp.web.get("/debug/policy",
                                                         debug_policy_handler(stack.proxy))])
    async with TestClient(TestServer(app)) as client:
        resp = await client.get("/debug/policy")
        body = await resp.json()
        assert resp.status == 200
        assert body["presets"] == ["math-think"]
        assert body["rules"][0]["name"] == "math-think"
        assert body["budgets"]["m|-"]["samples"] == 1
        assert body["shared"] is False
        assert (await client.post("/debug/policy")).status == 405
