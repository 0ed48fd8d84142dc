"""What the I/O layer counts (``sidecar.net.accounting``): the sidecar's metrics after
scripted runaways against the simulator, exact counter values."""

from __future__ import annotations

import aiohttp

from tests.stack import StackFactory


async def chat(url: str, model: str, prompt: str, mode: str = "enforce",
               stream: bool = True) -> bytes:
    body = {"model": model, "stream": stream, "max_tokens": 3000,
            "messages": [{"role": "user", "content": prompt}]}
    async with aiohttp.ClientSession() as s, s.post(
            url + "/v1/chat/completions", json=body, headers={"X-Runaway-Mode": mode}) as r:
        return await r.read()


def total(stack: object, name: str, **labels: str) -> float:
    """Sum of every sample called ``name`` whose labels include ``labels``."""
    registry = stack.registry  # type: ignore[attr-defined]
    return sum(s.value for m in registry.collect() for s in m.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


async def test_counters_after_scripted_runaways(make_stack: StackFactory) -> None:
    """Two enforced runaways, one cut, one shadowed and one healthy request, counted exactly."""
    stack = await make_stack()
    await chat(stack.url, "sim-loop", "a")
    await chat(stack.url, "sim-loop", "b", stream=False)
    await chat(stack.url, "sim-loop", "c", mode="cut")
    await chat(stack.url, "sim-loop", "d", mode="shadow")
    await chat(stack.url, "sim-healthy", "e")
    await chat(stack.url, "sim-healthy", "f", mode="off")
    p = "runaway_sidecar_"
    assert total(stack, p + "requests_total", route="chat", outcome="reissued",
                 model="sim-loop") == 2
    assert total(stack, p + "requests_total", route="chat", outcome="cut") == 1
    assert total(stack, p + "requests_total", route="chat", outcome="shadow") == 1
    assert total(stack, p + "requests_total", route="chat", outcome="ok",
                 model="sim-healthy") == 1
    assert total(stack, p + "runaways_total", model="sim-loop", mode="enforce") == 2
    assert total(stack, p + "runaways_total", model="sim-loop", mode="cut") == 1
    assert total(stack, p + "shadow_detections_total", model="sim-loop") == 1
    assert total(stack, p + "reissues_total", step="thinking_off", outcome="ok") == 2
    assert total(stack, p + "detection_point_tokens_count") == 4
    # sim-loop streams the same loop whatever the prompt, so every detection fires at the
    # same token: three cut attempts wasted three times what one detection point holds.
    wasted = total(stack, p + "wasted_tokens_total", model="sim-loop")
    point = total(stack, p + "detection_point_tokens_sum") / 4
    assert point > 0
    assert wasted == 3 * point
    assert total(stack, p + "saved_tokens_total", model="sim-loop") == 3 * 3000 - wasted
    assert total(stack, p + "active_streams") == 0
    assert total(stack, p + "thinking_tokens_count", model="sim-loop") == 4
    assert total(stack, p + "time_to_first_content_seconds_count", model="sim-loop") == 2
    assert total(stack, p + "upstream_errors_total") == 0

