"""Completions request defaults and the raw prompt's think state."""

from __future__ import annotations

import orjson

from tests.simulator.conftest import SimFactory, events


async def test_completions_default_max_tokens_is_16(sim: SimFactory) -> None:
    """/v1/completions defaults max_tokens to 16, like vLLM's CompletionRequest."""
    client = await sim()
    body = {"model": "sim-loop", "prompt": "Hello"}
    data = await (await client.post("/v1/completions", json=body)).json()
    assert data["usage"] == {
        "prompt_tokens": 1,
        "total_tokens": 17,
        "completion_tokens": 16,
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    }
    assert data["object"] == "text_completion"
    assert data["choices"][0]["finish_reason"] == "length"


async def test_completions_prompt_with_closed_think_answers(sim: SimFactory) -> None:
    """A raw prompt that closes its think block gets the answer, then a stop."""
    client = await sim()
    prompt = "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    body = {"model": "sim-loop", "prompt": prompt, "max_tokens": 50, "stream": True}
    payloads = [
        orjson.loads(p)
        for p in events(await (await client.post("/v1/completions", json=body)).read())[:-1]
    ]
    text = "".join(p["choices"][0]["text"] for p in payloads)
    assert text == " Fix: guard empty lists before indexing!"
    assert payloads[-1]["choices"][0]["finish_reason"] == "stop"
    assert payloads[-1]["choices"][0]["text"] == ""
    assert "system_fingerprint" in payloads[-1]
