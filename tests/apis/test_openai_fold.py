"""Non-streaming bodies rebuilt from a stream match vLLM's own bytes."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from sidecar.apis.openai.fold import OpenAIFold
from sidecar.codecs.sse import SSEDecoder

CAPTURES = Path(__file__).parent.parent / "data" / "captures" / "vllm-0.32.0"


def aggregate(name: str) -> bytes:
    agg = OpenAIFold("chat")
    for ev in SSEDecoder().feed((CAPTURES / name).read_bytes()):
        assert ev.data is not None
        if ev.data == b"[DONE]":
            continue
        chunk = orjson.loads(ev.data)
        agg.add(chunk)
        if chunk.get("usage") and not chunk["choices"]:
            agg.set_usage(chunk["usage"])
    return agg.body()


def normalize(body: bytes) -> dict[str, object]:
    obj = orjson.loads(body)
    for key in ("id", "created"):
        obj[key] = None
    return obj  # type: ignore[no-any-return]


def test_thinking_loop_body_matches_vllm() -> None:
    """The aggregated loop stream equals vLLM's non-streaming body byte for byte
    (only id and created differ: they were two requests)."""
    ours = aggregate("chat_thinking_loop_usage.sse")
    theirs = (CAPTURES / "chat_thinking_loop_nonstream.json").read_bytes()
    assert normalize(ours) == normalize(theirs)
    ours_obj, theirs_obj = orjson.loads(ours), orjson.loads(theirs)
    ours_obj["id"], ours_obj["created"] = theirs_obj["id"], theirs_obj["created"]
    assert orjson.dumps(ours_obj) == theirs.strip()


def test_thinking_off_body_matches_vllm() -> None:
    """A content-only stream aggregates to vLLM's body with ``reasoning: null``."""
    ours = orjson.loads(aggregate("chat_thinking_off_answer.sse"))
    theirs = orjson.loads((CAPTURES / "chat_thinking_off_nonstream.json").read_bytes())
    assert list(ours) == list(theirs)
    assert ours["choices"][0]["message"] == theirs["choices"][0]["message"]
    assert ours["usage"] == theirs["usage"]


def test_tool_calls_are_merged() -> None:
    """Streamed tool-call fragments merge into complete calls."""
    agg = OpenAIFold("chat")
    frags = [{"index": 0, "id": "call_1", "type": "function",
              "function": {"name": "get", "arguments": "{\"a\""}},
             {"index": 0, "function": {"arguments": ": 1}"}}]
    for frag in frags:
        agg.add({"id": "x", "created": 1, "model": "m",
                 "choices": [{"index": 0, "delta": {"tool_calls": [frag]}}]})
    body = orjson.loads(agg.body())
    call = body["choices"][0]["message"]["tool_calls"][0]
    assert call == {"id": "call_1", "type": "function",
                    "function": {"name": "get", "arguments": "{\"a\": 1}"}}


LLAMACPP = Path(__file__).parent.parent / "data" / "captures" / "llama.cpp"


def aggregate_llamacpp(name: str) -> bytes:
    """A llama-server stream capture folded into a llama.cpp-layout body."""
    agg = OpenAIFold("chat", layout="llamacpp")
    for ev in SSEDecoder().feed((LLAMACPP / name).read_bytes()):
        assert ev.data is not None
        if ev.data == b"[DONE]":
            continue
        chunk = orjson.loads(ev.data)
        agg.add(chunk)
        if chunk.get("usage") and not chunk["choices"]:
            agg.set_usage(chunk["usage"])
    return agg.body()


@pytest.mark.parametrize(("stream", "body"), [
    ("chat_thinking_loop_usage.sse", "chat_thinking_loop_nonstream.json"),
    ("chat_thinking_off_answer.sse", "chat_thinking_off_nonstream.json"),
    ("chat_leaky_thinking_off_loop.sse", "chat_leaky_thinking_off_nonstream.json"),
    ("chat_healthy_thinking.sse", "chat_healthy_nonstream.json"),
])
def test_llamacpp_layout_matches_llama_server(stream: str, body: str) -> None:
    """In llama.cpp's layout, an aggregated stream is llama-server's own non-streaming
    body byte for byte, once the values drawn per response (id, created, timings and the
    prompt cache's share) are taken from the real body: no null fields, content a string
    even when empty, reasoning_content only with reasoning, id after usage."""
    ours = orjson.loads(aggregate_llamacpp(stream))
    theirs_bytes = (LLAMACPP / body).read_bytes()
    theirs = orjson.loads(theirs_bytes)
    for key in ("id", "created", "timings"):
        ours[key] = theirs[key]
    ours["usage"]["prompt_tokens_details"] = theirs["usage"]["prompt_tokens_details"]
    assert orjson.dumps(ours) == theirs_bytes.strip()


def test_llamacpp_layout_when_every_attempt_was_cut() -> None:
    """A body whose usage the sidecar made up (every attempt cut) keeps llama.cpp's key
    order, and hidden reasoning is left out rather than null."""
    agg = OpenAIFold("chat", hide_reasoning=True, layout="llamacpp")
    agg.add({"choices": [{"finish_reason": None, "index": 0,
                          "delta": {"role": "assistant", "content": None}}],
             "created": 1, "id": "chatcmpl-x", "model": "m", "system_fingerprint": "b1",
             "object": "chat.completion.chunk"})
    agg.add({"choices": [{"finish_reason": None, "index": 0,
                          "delta": {"reasoning_content": " Wait"}}],
             "created": 1, "id": "chatcmpl-x", "model": "m", "system_fingerprint": "b1",
             "object": "chat.completion.chunk"})
    agg.set_choice_text(0, finish_reason="length")
    agg.set_usage({"prompt_tokens": 0, "total_tokens": 1, "completion_tokens": 1,
                   "completion_tokens_details": {"reasoning_tokens": 1}})
    assert agg.body() == (
        b'{"choices":[{"finish_reason":"length","index":0,"message":{"role":"assistant",'
        b'"content":""}}],"created":1,"model":"m","system_fingerprint":"b1",'
        b'"object":"chat.completion","usage":{"completion_tokens":1,"prompt_tokens":0,'
        b'"total_tokens":1,"completion_tokens_details":{"reasoning_tokens":1}},'
        b'"id":"chatcmpl-x"}')
