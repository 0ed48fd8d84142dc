"""The coding-agent APIs in front of the other servers, simulated in their dialects:
llama.cpp (verified against its real bytes: no sequence numbers on Responses, and a
Messages API that ignores thinking.disabled), Ollama (from its documentation: reasoning
as reasoning_summary_text) and SGLang (whose Messages stream drops the reasoning)."""

from __future__ import annotations

import pytest
from anthropic import AsyncAnthropic
from openai import AsyncOpenAI

from tests.dialects.conftest import DialectStack
from tests.net.agent_helpers import ANSWER, PROMPT, post, sse_events


@pytest.mark.parametrize("dialect", ["llamacpp", "ollama"])
async def test_messages_loop_is_cut_and_answered(dialect_stack: DialectStack,
                                                 dialect: str) -> None:
    """The thinking loop is cut and the reissue, with the thinking switch that works on
    that server, answers; the SDK gets one message."""
    stack = await dialect_stack(dialect)
    client = AsyncAnthropic(base_url=stack.url, api_key="k", max_retries=0)
    async with client.messages.stream(model="sim-loop", max_tokens=3000, messages=[
            {"role": "user", "content": PROMPT}]) as stream:
        final = await stream.get_final_message()
    await client.close()
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert ANSWER in "".join(b.text for b in final.content if b.type == "text")
    assert stack.metric("runaway_sidecar_requests_total", route="messages", model="sim-loop",
                        outcome="reissued") == 1


@pytest.mark.parametrize("dialect", ["llamacpp", "ollama"])
async def test_responses_loop_is_cut_and_answered(dialect_stack: DialectStack,
                                                  dialect: str) -> None:
    """The reasoning loop is cut and answered; numbering follows the server (llama.cpp
    gives events no sequence_number and items no output_index, so neither does the
    sidecar; Ollama's are contiguous); the cut item is closed and in the final output."""
    stack = await dialect_stack(dialect)
    _, _, data = await post(stack.url + "/v1/responses", {
        "model": "sim-loop", "max_output_tokens": 3000, "input": PROMPT, "stream": True})
    events = sse_events(data)
    numbers = [e.get("sequence_number") for _, e in events]
    if dialect == "llamacpp":
        assert numbers == [None] * len(events)
        assert all("output_index" not in e for _, e in events)
    else:
        assert numbers == list(range(len(events)))
    names = [n for n, _ in events]
    assert names.count("response.completed") == 1
    assert names.count("response.output_item.added") == names.count("response.output_item.done")
    final = events[-1][1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "message"]
    assert ANSWER in final["output"][-1]["content"][0]["text"]
    client = AsyncOpenAI(base_url=stack.url + "/v1", api_key="k", max_retries=0)
    response = await client.responses.create(model="sim-loop", max_output_tokens=3000,
                                             input="Another request.")
    await client.close()
    assert ANSWER in response.output_text
    assert stack.metric("runaway_sidecar_requests_total", route="responses", model="sim-loop",
                        outcome="reissued") == 2


async def test_sglang_messages_stream_shows_no_reasoning(dialect_stack: DialectStack) -> None:
    """SGLang's Messages stream drops the reasoning: there is nothing to watch, so the
    stream reaches the client as the server sent it (a documented limit: use chat
    completions or a budget there)."""
    stack = await dialect_stack("sglang")
    request = {"model": "sim-loop", "max_tokens": 300, "stream": True,
               "messages": [{"role": "user", "content": PROMPT}]}
    _, _, direct = await post(stack.sim_url + "/v1/messages", request)
    _, _, proxied = await post(stack.url + "/v1/messages", request)
    assert [n for n, _ in sse_events(proxied)] == [n for n, _ in sse_events(direct)]
    assert b": runaway" not in proxied
