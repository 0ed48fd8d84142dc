"""Non-streaming bodies rebuilt from a stream match vLLM's own bytes."""

from __future__ import annotations

from pathlib import Path

import orjson

from sidecar.apis.openai.fold import Aggregator
from sidecar.codecs.sse import SSEDecoder

CAPTURES = Path(__file__).parent.parent / "data" / "captures" / "vllm-0.32.0"


def aggregate(name: str) -> bytes:
    agg = Aggregator("chat")
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
    agg = Aggregator("chat")
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
