"""The official anthropic and openai SDKs, pointed at a loopback simulated node, read its
/v1/messages and /v1/responses answers (streaming and not) as they read a real server's."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
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


async def _openai(sim: SimFactory, **config: Any) -> openai.AsyncOpenAI:
    node = await sim(**config)
    return openai.AsyncOpenAI(base_url=str(node.make_url("/v1")), api_key="unused",
                              max_retries=0, timeout=10.0)


# ------------------------------------------------------------------------- anthropic


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


# ---------------------------------------------------------------------------- openai


async def test_responses_create_loop_is_incomplete(sim: SimFactory) -> None:
    """Non-streaming sim-loop: one reasoning item, status incomplete (max_output_tokens)."""
    client = await _openai(sim)
    response = await client.responses.create(model="sim-loop", input="Hello",
                                             max_output_tokens=60)
    await client.close()
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert [item.type for item in response.output] == ["reasoning"]
    item: Any = response.output[0]
    assert item.content[0].text.startswith(LOOP)
    assert response.output_text == ""
    assert response.usage is not None
    assert response.usage.output_tokens == 60
    assert response.usage.output_tokens_details.reasoning_tokens == 59
    assert response.id.startswith("resp_")


async def test_responses_create_stream_loop(sim: SimFactory) -> None:
    """Streaming sim-loop: typed events with sequence numbers 0, 1, 2, … and a
    response.completed whose output is the streamed reasoning item."""
    client = await _openai(sim)
    stream = await client.responses.create(model="sim-loop", input="Hello",
                                           max_output_tokens=40, stream=True)
    events = [event async for event in stream]
    await client.close()
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created"
    assert events[1].type == "response.in_progress"
    deltas = [e for e in events if e.type == "response.reasoning_text.delta"]
    assert len(deltas) == 39
    last: Any = events[-1]
    assert last.type == "response.completed"
    assert last.response.status == "incomplete"
    added: Any = events[2]
    assert last.response.output[0].id == added.item.id


async def test_responses_stream_healthy_reasons_then_answers(sim: SimFactory) -> None:
    """responses.stream on sim-healthy: a reasoning item then a message, completed."""
    client = await _openai(sim)
    async with client.responses.stream(model="sim-healthy", input="Hello",
                                       max_output_tokens=4000) as stream:
        text = ""
        async for event in stream:
            if event.type == "response.output_text.delta":
                text += event.delta
        response = await stream.get_final_response()
    await client.close()
    assert [item.type for item in response.output] == ["reasoning", "message"]
    assert response.status == "completed"
    assert response.output_text == text
    assert text.strip()


async def test_responses_effort_none_answers_at_once(sim: SimFactory) -> None:
    """reasoning.effort none on sim-loop: only the short answer, completed."""
    client = await _openai(sim)
    response = await client.responses.create(model="sim-loop", input="Hello",
                                             max_output_tokens=60,
                                             reasoning={"effort": "none"})
    await client.close()
    assert [item.type for item in response.output] == ["message"]
    assert response.output_text == FIX
    assert response.status == "completed"
    assert response.usage is not None
    assert response.usage.output_tokens_details.reasoning_tokens == 0


async def test_responses_leaky_loops_in_text_with_effort_none(sim: SimFactory) -> None:
    """sim-leaky with effort none (stream): the loop moves into output_text, incomplete."""
    client = await _openai(sim)
    async with client.responses.stream(model="sim-leaky", input="Hello",
                                       max_output_tokens=80,
                                       reasoning={"effort": "none"}) as stream:
        response = await stream.get_final_response()
    await client.close()
    assert response.output_text.startswith(FIX + LOOP + LOOP)
    assert response.status == "incomplete"


async def test_responses_include_reasoning_false_hides_it(sim: SimFactory) -> None:
    """include_reasoning false (vLLM's extra): no reasoning item, tokens still counted."""
    client = await _openai(sim)
    response = await client.responses.create(model="sim-healthy", input="Hello",
                                             max_output_tokens=4000,
                                             extra_body={"include_reasoning": False})
    await client.close()
    assert [item.type for item in response.output] == ["message"]
    assert response.usage is not None
    assert response.usage.output_tokens_details.reasoning_tokens > 100


async def test_responses_by_id_and_background_are_refused(sim: SimFactory) -> None:
    """Without the store, retrieve and cancel are 404 and background is a 400."""
    client = await _openai(sim)
    with pytest.raises(openai.NotFoundError) as missing:
        await client.responses.retrieve("resp_0123456789abcdef")
    with pytest.raises(openai.NotFoundError):
        await client.responses.cancel("resp_0123456789abcdef")
    with pytest.raises(openai.BadRequestError) as background:
        await client.responses.create(model="sim-loop", input="Hello", background=True)
    await client.close()
    assert "resp_0123456789abcdef" in str(missing.value)
    assert "VLLM_ENABLE_RESPONSES_API_STORE" in str(background.value)
