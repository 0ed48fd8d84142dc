"""Agent loops through the official SDKs (issue 39): the ``refuse`` error is the SDKs'
own BadRequestError with the sidecar's message, and the ``nudge`` body the node gets is a
valid request by the SDKs' own request types; the nudged request's answer parses."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import orjson
import pydantic
import pytest
from anthropic.types import MessageParam
from openai.types.chat import ChatCompletionMessageParam
from openai.types.responses import ResponseInputItemParam

from sidecar.core.agent_loops import NOTE_MARK
from tests.detectors.test_agent_history import chat_body, messages_body, responses_body
from tests.stack import Stack, StackFactory

MODEL = "sim-healthy"


def openai_client(stack: Stack, mode: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=stack.url + "/v1", api_key="k", max_retries=0,
                              default_headers={"X-Agent-Loops": mode})


def anthropic_client(stack: Stack, mode: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=stack.url, api_key="k", max_retries=0,
                                    default_headers={"X-Agent-Loops": mode})


def valid(param_type: Any, items: list[Any]) -> None:
    """``items`` validate as a list of the SDK's TypedDict ``param_type``, strictly."""
    pydantic.TypeAdapter(list[param_type]).validate_python(items, strict=True)


async def test_openai_chat(make_stack: StackFactory) -> None:
    """Chat completions: refuse raises openai.BadRequestError (400) with the message;
    nudge's upstream messages are ChatCompletionMessageParams and the answer parses."""
    stack = await make_stack(tap=True)
    messages = chat_body(7)["messages"]
    async with openai_client(stack, "refuse") as client:
        with pytest.raises(openai.BadRequestError) as err:
            await client.chat.completions.create(model=MODEL, messages=messages)
    assert err.value.status_code == 400
    assert "runaway-sidecar stopped an agent loop" in err.value.message
    assert "`Grep` 7 times" in err.value.message
    async with openai_client(stack, "nudge") as client:
        done = await client.chat.completions.create(model=MODEL,
                                                    messages=chat_body(6)["messages"])
    assert done.choices[0].message.content
    assert stack.tap is not None
    (sent,) = stack.tap.bodies
    upstream = orjson.loads(sent)["messages"]
    assert NOTE_MARK in upstream[-1]["content"]
    valid(ChatCompletionMessageParam, upstream)


async def test_anthropic_messages(make_stack: StackFactory) -> None:
    """Messages: refuse raises anthropic.BadRequestError; nudge's upstream messages are
    MessageParams (the note a text block after the tool_result) and the answer parses."""
    stack = await make_stack(tap=True)
    async with anthropic_client(stack, "refuse") as client:
        with pytest.raises(anthropic.BadRequestError) as err:
            await client.messages.create(model=MODEL, max_tokens=200,
                                         messages=messages_body(7)["messages"])
    assert err.value.status_code == 400
    assert "runaway-sidecar stopped an agent loop" in err.value.message
    async with anthropic_client(stack, "nudge") as client:
        done = await client.messages.create(model=MODEL, max_tokens=4000,
                                            messages=messages_body(6)["messages"])
    assert [block.type for block in done.content] == ["thinking", "text"]
    assert stack.tap is not None
    (sent,) = stack.tap.bodies
    upstream = orjson.loads(sent)["messages"]
    assert upstream[-1]["content"][-1]["text"].startswith(NOTE_MARK)
    valid(MessageParam, upstream)


async def test_openai_responses(make_stack: StackFactory) -> None:
    """Responses: refuse raises openai.BadRequestError; nudge's upstream input items are
    ResponseInputItemParams and the streamed answer completes."""
    stack = await make_stack(tap=True)
    items = json.loads(json.dumps(responses_body(7)["input"]))
    async with openai_client(stack, "refuse") as client:
        with pytest.raises(openai.BadRequestError) as err:
            await client.responses.create(model=MODEL, input=items)
    assert "runaway-sidecar stopped an agent loop" in err.value.message
    async with openai_client(stack, "nudge") as client:
        done = await client.responses.create(model=MODEL, input=responses_body(6)["input"])
    assert done.status == "completed"
    assert stack.tap is not None
    (sent,) = stack.tap.bodies
    upstream = orjson.loads(sent)["input"]
    assert upstream[-1]["content"][0]["text"].startswith(NOTE_MARK)
    valid(ResponseInputItemParam, [i for i in upstream if i.get("type") != "reasoning"])
