"""The official openai SDK reads the simulated chat completions and models."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.simulator.conftest import SimFactory

HELLO: list[Any] = [{"role": "user", "content": "Hello"}]


async def _client(sim: SimFactory, **config: Any) -> openai.AsyncOpenAI:
    node = await sim(**config)
    base = str(node.make_url("/v1"))
    assert base.startswith("http://127.0.0.1:")
    return openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0, timeout=10.0)


async def test_sdk_streams_reasoning_then_content(sim: SimFactory) -> None:
    """Streaming: the SDK sees reasoning deltas, content deltas, a stop and usage."""
    client = await _client(sim)
    stream = await client.chat.completions.create(
        model="sim-healthy",
        messages=HELLO,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"thinking_token_budget": 40},
    )
    reasoning = content = ""
    finish = None
    usage = None
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            delta: Any = choice.delta
            reasoning += getattr(delta, "reasoning", None) or ""
            content += delta.content or ""
            finish = choice.finish_reason or finish
    await client.close()
    assert reasoning
    assert content.strip()
    assert finish == "stop"
    assert usage is not None
    assert usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == 40


async def test_sdk_non_streaming_loop(sim: SimFactory) -> None:
    """Non-streaming: reasoning in message.reasoning, content None, finish length."""
    client = await _client(sim)
    result = await client.chat.completions.create(model="tiny-qwen", messages=HELLO, max_tokens=48)
    await client.close()
    message: Any = result.choices[0].message
    assert message.content is None
    assert message.reasoning.startswith(" Hmm, maybe my earlier reasoning")
    assert result.choices[0].finish_reason == "length"
    assert result.usage is not None
    assert result.usage.prompt_tokens == 9
    assert result.usage.completion_tokens == 48


async def test_sdk_thinking_off(sim: SimFactory) -> None:
    """extra_body chat_template_kwargs turns thinking off: a short answer in content."""
    client = await _client(sim)
    result = await client.chat.completions.create(
        model="sim-loop",
        messages=HELLO,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    await client.close()
    assert result.choices[0].message.content == " Fix: guard empty lists before indexing!"
    assert result.choices[0].finish_reason == "stop"


async def test_sdk_maps_errors(sim: SimFactory) -> None:
    """vLLM's error bodies become the SDK's typed errors."""
    client = await _client(sim)
    with pytest.raises(openai.NotFoundError):
        await client.chat.completions.create(model="nope", messages=HELLO)
    with pytest.raises(openai.BadRequestError):
        await client.chat.completions.create(model="sim-loop", messages=HELLO, max_tokens=10**6)
    await client.close()


async def test_sdk_lists_models(sim: SimFactory) -> None:
    """/v1/models parses as a model list with every simulated name."""
    client = await _client(sim)
    names = [m.id async for m in client.models.list()]
    await client.close()
    assert "sim-healthy" in names
    assert "tiny-qwen" in names
