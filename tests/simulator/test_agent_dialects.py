"""The agent APIs in the other servers' formats (``--dialect llamacpp|sglang|ollama``).

llama.cpp is byte-checked against its captures in test_agent_captures.py; here, what the
captures do not show, and the official SDKs reading each dialect. Ollama and SGLang follow
their documented source only (see sidecar/simulator/messages/servers.py, responses/servers.py).
"""

from __future__ import annotations

import re
from typing import Any

import anthropic
import openai
import orjson
import pytest
from aiohttp.test_utils import TestClient

from sidecar.simulator.engine.behaviours import FIX_ANSWER, LOOP_TOKENS
from tests.simulator.conftest import SimFactory

HELLO: list[Any] = [{"role": "user", "content": "Hello"}]
FIX = "".join(FIX_ANSWER)
LOOP = "".join(LOOP_TOKENS)


def _events(body: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in body.split(b"\n\n"):
        if not block:
            continue
        name, data = block.split(b"\n", 1)
        assert name.startswith(b"event: ")
        assert data.startswith(b"data: ")
        out.append((name[7:].decode(), orjson.loads(data[6:])))
    return out


async def _post(client: TestClient[Any, Any], path: str, body: dict[str, Any]) -> bytes:
    resp = await client.post(path, json=body)
    assert resp.status == 200, await resp.read()
    return await resp.read()


def _messages(**extra: Any) -> dict[str, Any]:
    return {"model": "sim-loop", "max_tokens": 30, "messages": HELLO, **extra}


def _responses(**extra: Any) -> dict[str, Any]:
    return {"model": "sim-loop", "input": "Hello", "max_output_tokens": 30, **extra}



# --------------------------------------------------------------------------- llama.cpp


async def test_llamacpp_thinking_then_text(sim: SimFactory) -> None:
    """⚠ Not captured: a reasoning item closes (no sequence numbers) before the message
    opens; a thinking block closes with an empty signature before the text block."""
    client = await sim(dialect="llamacpp")
    events = _events(await _post(client, "/v1/responses",
                                 {"model": "sim-healthy", "input": "Hi",
                                  "max_output_tokens": 4000, "stream": True}))
    names = [n for n, _ in events]
    assert all("sequence_number" not in e for _, e in events)
    done = names.index("response.output_item.done")
    assert names[done + 1] == "response.output_item.added"
    assert events[done + 1][1]["item"]["type"] == "message"
    final = events[-1][1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "message"]
    events = _events(await _post(client, "/v1/messages",
                                 {"model": "sim-healthy", "messages": HELLO,
                                  "max_tokens": 4000, "stream": True}))
    starts = [e["content_block"]["type"] for n, e in events if n == "content_block_start"]
    assert starts == ["thinking", "text"]
    signature = next(e for n, e in events if e.get("delta", {}).get("type") == "signature_delta")
    assert signature == {"type": "content_block_delta", "index": 0,
                         "delta": {"type": "signature_delta", "signature": ""}}


async def test_llamacpp_sdks_read_it(sim: SimFactory) -> None:
    """Both SDKs parse llama-server's formats: thinking.disabled still thinks there,
    effort none answers with the "\\n\\n" its parser leaves before the text. (openai's
    responses.stream helper cannot accumulate these events: it indexes items by
    output_index, which llama-server's events lack, as captured.)"""
    node = await sim(dialect="llamacpp")
    ant = anthropic.AsyncAnthropic(base_url=str(node.make_url("")).rstrip("/"),
                                   api_key="unused", max_retries=0, timeout=10.0)
    async with ant.messages.stream(model="sim-loop", max_tokens=30, messages=HELLO,
                                   thinking={"type": "disabled"}) as stream:
        message = await stream.get_final_message()
    await ant.close()
    assert [b.type for b in message.content] == ["thinking"]
    oai = openai.AsyncOpenAI(base_url=str(node.make_url("/v1")), api_key="unused",
                             max_retries=0, timeout=10.0)
    response = await oai.responses.create(model="sim-loop", input="Hello",
                                          max_output_tokens=30, reasoning={"effort": "none"})
    stream = await oai.responses.create(model="sim-loop", input="Hello", max_output_tokens=30,
                                        reasoning={"effort": "none"}, stream=True)
    events = [event async for event in stream]
    await oai.close()
    assert response.output_text == "\n\n" + FIX
    assert response.status == "completed"
    last: Any = events[-1]
    assert last.type == "response.completed"
    assert last.response.output_text == "\n\n" + FIX


async def test_llamacpp_has_no_response_store_routes(sim: SimFactory) -> None:
    """GET /v1/responses/{id} is not a llama-server route."""
    client = await sim(dialect="llamacpp")
    assert (await client.get("/v1/responses/resp_x")).status == 404


# ------------------------------------------------------------------------------- Ollama


async def test_ollama_messages_stream(sim: SimFactory) -> None:
    """⚠ Documented: msg_ + 24 hex, index before the block, no signature_delta, a
    message_delta without stop_sequence; chat_template_kwargs does not turn thinking off."""
    client = await sim(dialect="ollama")
    body = await _post(client, "/v1/messages", _messages(
        stream=True, chat_template_kwargs={"enable_thinking": False}))
    events = _events(body)
    start = events[0][1]["message"]
    assert re.fullmatch(r"msg_[0-9a-f]{24}", start["id"])
    assert list(start) == ["id", "type", "role", "model", "content", "usage"]
    assert b'"index":0,"content_block"' in body
    assert b"signature" not in body
    assert events[-2][1] == {"type": "message_delta", "delta": {"stop_reason": "max_tokens"},
                             "usage": {"input_tokens": 9, "output_tokens": 30}}


async def test_ollama_messages_sdk_and_body(sim: SimFactory) -> None:
    """thinking.disabled is think=false; the non-streaming body ends in a newline (Go's
    encoder); an unknown model is Ollama's not-found in Anthropic's error shape."""
    node = await sim(dialect="ollama")
    client = anthropic.AsyncAnthropic(base_url=str(node.make_url("")).rstrip("/"),
                                      api_key="unused", max_retries=0, timeout=10.0)
    message = await client.messages.create(model="sim-loop", max_tokens=30, messages=HELLO,
                                           thinking={"type": "disabled"})
    async with client.messages.stream(model="sim-healthy", max_tokens=4000,
                                      messages=HELLO) as stream:
        healthy = await stream.get_final_message()
    await client.close()
    assert [b.type for b in message.content] == ["text"]
    assert [b.type for b in healthy.content] == ["thinking", "text"]
    resp = await node.post("/v1/messages", json=_messages())
    assert (await resp.read()).endswith(b"}\n")
    resp = await node.post("/v1/messages", json=_messages(model="nope"))
    error = await resp.json()
    assert resp.status == 404
    assert error["error"] == {"type": "not_found_error",
                              "message": 'model "nope" not found, try pulling it first'}
    assert re.fullmatch(r"req_[0-9a-f]{24}", error["request_id"])


async def test_ollama_responses_stream(sim: SimFactory) -> None:
    """⚠ Documented: reasoning as reasoning_summary_text deltas (summary_index 0), keys
    sorted (Go maps), sequence numbers 0, 1, …, the reasoning text in summary and in
    encrypted_content, status completed even at the cap, reasoning_tokens 0."""
    client = await sim(dialect="ollama")
    body = await _post(client, "/v1/responses", _responses(stream=True))
    events = _events(body)
    assert [e["sequence_number"] for _, e in events] == list(range(len(events)))
    for _, event in events:
        assert list(event) == sorted(event)
    deltas = [e for n, e in events if n == "response.reasoning_summary_text.delta"]
    assert len(deltas) == 29
    assert all(e["summary_index"] == 0 for e in deltas)
    final = events[-1][1]["response"]
    item = final["output"][0]
    assert item["summary"][0]["text"] == item["encrypted_content"]
    assert item["encrypted_content"].startswith(LOOP)
    assert final["status"] == "completed"
    assert final["usage"]["output_tokens_details"] == {"reasoning_tokens": 0}
    assert b'"temperature":1,' in body


async def test_ollama_responses_sdk(sim: SimFactory) -> None:
    """The openai SDK reads Ollama's Responses stream; effort none is think=false; an
    effort Ollama does not know is refused."""
    node = await sim(dialect="ollama")
    client = openai.AsyncOpenAI(base_url=str(node.make_url("/v1")), api_key="unused",
                                max_retries=0, timeout=10.0)
    async with client.responses.stream(model="sim-healthy", input="Hello",
                                       max_output_tokens=4000) as stream:
        response = await stream.get_final_response()
    off = await client.responses.create(model="sim-loop", input="Hello",
                                        max_output_tokens=30, reasoning={"effort": "none"})
    with pytest.raises(openai.BadRequestError):
        await client.responses.create(model="sim-loop", input="Hello",
                                      reasoning={"effort": "minimal"})
    await client.close()
    assert [i.type for i in response.output] == ["reasoning", "message"]
    assert response.output_text.strip()
    assert off.output_text == FIX


# ------------------------------------------------------------------------------- SGLang


async def test_sglang_messages_stream_drops_reasoning(sim: SimFactory) -> None:
    """⚠ Documented: SGLang's streaming converter drops reasoning, so a thinking loop shows
    no block at all until max_tokens; with thinking off the text block streams."""
    client = await sim(dialect="sglang")
    events = _events(await _post(client, "/v1/messages", _messages(stream=True)))
    assert [n for n, _ in events] == ["message_start", "message_delta", "message_stop"]
    assert events[1][1]["delta"] == {"stop_reason": "max_tokens"}
    events = _events(await _post(client, "/v1/messages",
                                 _messages(stream=True, thinking={"type": "disabled"})))
    text = "".join(e["delta"]["text"] for n, e in events if n == "content_block_delta")
    assert text == FIX


async def test_sglang_messages_body_and_no_responses(sim: SimFactory) -> None:
    """The non-streaming body keeps the thinking block (signature "dummy-signature"); the
    Responses endpoint is not simulated for SGLang (its format is not documented)."""
    client = await sim(dialect="sglang")
    body = orjson.loads(await _post(client, "/v1/messages", _messages()))
    assert body["content"][0]["signature"] == "dummy-signature"
    assert re.fullmatch(r"msg_[0-9a-f]{32}", body["id"])
    assert (await client.post("/v1/responses", json=_responses())).status == 404
