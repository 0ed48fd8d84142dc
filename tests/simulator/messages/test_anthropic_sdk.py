"""The official anthropic SDK reads the simulated Messages API."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from sidecar.simulator.engine.behaviours import FIX_ANSWER, LOOP_TOKENS
from tests.simulator.conftest import SimFactory

HELLO: list[Any] = [{"role": "user", "content": "Hello"}]
LOOP = "".join(LOOP_TOKENS)
FIX = "".join(FIX_ANSWER)


async def _anthropic(sim: SimFactory, **config: Any) -> anthropic.AsyncAnthropic:
    node = await sim(**config)
    base = str(node.make_url("")).rstrip("/")
    assert base.startswith("http://127.0.0.1:")
    return anthropic.AsyncAnthropic(base_url=base, api_key="unused", max_retries=0,
                                    timeout=10.0)


async def test_messages_create_loop_runs_to_the_cap(sim: SimFactory) -> None:
    """Non-streaming sim-loop: one thinking block of the loop, no text, max_tokens."""
    client = await _anthropic(sim)
    message = await client.messages.create(model="sim-loop", max_tokens=60, messages=HELLO)
    await client.close()
    assert [b.type for b in message.content] == ["thinking"]
    block: Any = message.content[0]
    assert block.thinking.startswith(LOOP + LOOP)
    assert len(block.signature) == 32
    assert message.stop_reason == "max_tokens"
    assert message.usage.input_tokens == 9
    assert message.usage.output_tokens == 60
    assert message.id.startswith("chatcmpl-")


async def test_messages_create_stream_loop(sim: SimFactory) -> None:
    """Streaming sim-loop: the SDK's typed events, 59 thinking deltas for 60 tokens (the
    <think> token is counted but never shown), a signature, then max_tokens."""
    client = await _anthropic(sim)
    stream = await client.messages.create(model="sim-loop", max_tokens=60, messages=HELLO,
                                          stream=True)
    kinds: list[str] = []
    thinking = ""
    stop = None
    output_tokens = None
    async for event in stream:
        kinds.append(event.type)
        if event.type == "content_block_delta" and event.delta.type == "thinking_delta":
            thinking += event.delta.thinking
        if event.type == "message_delta":
            stop = event.delta.stop_reason
            output_tokens = event.usage.output_tokens
    await client.close()
    assert kinds[0] == "message_start"
    assert kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds.count("content_block_delta") == 60  # 59 thinking + the signature
    assert thinking.startswith(LOOP)
    assert stop == "max_tokens"
    assert output_tokens == 60


async def test_messages_stream_healthy_thinks_then_answers(sim: SimFactory) -> None:
    """messages.stream on sim-healthy: a thinking block, then a text block, end_turn."""
    client = await _anthropic(sim)
    async with client.messages.stream(model="sim-healthy", max_tokens=4000,
                                      messages=HELLO) as stream:
        message = await stream.get_final_message()
    await client.close()
    assert [b.type for b in message.content] == ["thinking", "text"]
    thinking: Any = message.content[0]
    text: Any = message.content[1]
    assert len(thinking.thinking) > 200
    assert text.text.strip()
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens < 4000


async def test_messages_thinking_disabled_answers_at_once(sim: SimFactory) -> None:
    """thinking disabled on sim-loop: one text block with the short answer, end_turn."""
    client = await _anthropic(sim)
    message = await client.messages.create(model="sim-loop", max_tokens=60, messages=HELLO,
                                           thinking={"type": "disabled"})
    await client.close()
    assert [b.type for b in message.content] == ["text"]
    text: Any = message.content[0]
    assert text.text == FIX
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens == 13  # the pre-filled empty think block: 4 tokens


async def test_messages_leaky_loops_in_text_with_thinking_off(sim: SimFactory) -> None:
    """sim-leaky with thinking off (stream): the loop moves into the text block."""
    client = await _anthropic(sim)
    async with client.messages.stream(
            model="sim-leaky", max_tokens=80, messages=HELLO,
            extra_body={"chat_template_kwargs": {"enable_thinking": False}}) as stream:
        message = await stream.get_final_message()
    await client.close()
    assert [b.type for b in message.content] == ["text"]
    text: Any = message.content[0]
    assert text.text.startswith(FIX + LOOP + LOOP)
    assert message.stop_reason == "max_tokens"


async def test_messages_budget_tokens_force_the_answer(sim: SimFactory) -> None:
    """thinking.enabled with budget_tokens: exactly that many thinking tokens, then the
    text block (sim-loop keeps looping there, to the cap)."""
    client = await _anthropic(sim)
    message = await client.messages.create(
        model="sim-loop", max_tokens=1100, messages=HELLO,
        thinking={"type": "enabled", "budget_tokens": 1024})
    await client.close()
    assert [b.type for b in message.content] == ["thinking", "text"]
    thinking: Any = message.content[0]
    assert thinking.thinking == "".join((LOOP_TOKENS * 100)[:1024])
    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == 1100


async def test_messages_count_tokens(sim: SimFactory) -> None:
    """count_tokens counts the rendered prompt; thinking disabled adds the empty block."""
    client = await _anthropic(sim)
    on = await client.messages.count_tokens(model="sim-loop", messages=HELLO)
    off = await client.messages.count_tokens(model="sim-loop", messages=HELLO,
                                             thinking={"type": "disabled"})
    await client.close()
    assert on.input_tokens == 9
    assert off.input_tokens == 13


async def test_messages_errors_reach_the_sdk_typed(sim: SimFactory) -> None:
    """An unknown model is a NotFoundError; a missing max_tokens a BadRequestError."""
    client = await _anthropic(sim)
    with pytest.raises(anthropic.NotFoundError) as missing:
        await client.messages.create(model="nope", max_tokens=10, messages=HELLO)
    with pytest.raises(anthropic.BadRequestError) as bad:
        await client.messages.create(model="sim-loop", max_tokens=10, messages=HELLO,
                                     thinking={"type": "enabled", "budget_tokens": 5})
    await client.close()
    assert "does not exist" in str(missing.value)
    assert "greater than or equal to 1024" in str(bad.value)
