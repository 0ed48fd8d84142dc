"""The official openai SDK reads the simulated completions stream."""

from __future__ import annotations

from typing import Any

import openai

from tests.simulator.conftest import SimFactory


async def _client(sim: SimFactory, **config: Any) -> openai.AsyncOpenAI:
    node = await sim(**config)
    base = str(node.make_url("/v1"))
    assert base.startswith("http://127.0.0.1:")
    return openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0, timeout=10.0)


async def test_sdk_completions_stream(sim: SimFactory) -> None:
    """The legacy completions stream parses; special tokens are invisible in text."""
    client = await _client(sim)
    stream = await client.completions.create(
        model="sim-loop", prompt="Hello", max_tokens=10, stream=True
    )
    texts = [chunk.choices[0].text async for chunk in stream if chunk.choices]
    await client.close()
    assert texts[0] == ""
    assert "".join(texts) == " Hmm, maybe my earlier reasoning about this bug"
