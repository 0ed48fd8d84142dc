"""The official openai SDK reads the simulated Responses API."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from sidecar.simulator.engine.behaviours import FIX_ANSWER, LOOP_TOKENS
from tests.simulator.conftest import SimFactory

LOOP = "".join(LOOP_TOKENS)
FIX = "".join(FIX_ANSWER)


async def _openai(sim: SimFactory, **config: Any) -> openai.AsyncOpenAI:
    node = await sim(**config)
    return openai.AsyncOpenAI(base_url=str(node.make_url("/v1")), api_key="unused",
                              max_retries=0, timeout=10.0)


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
