"""The non-streaming body of Anthropic Messages (``sidecar.apis.messages.fold``)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from sidecar.apis.messages.fold import MessagesFold
from sidecar.core.wire import Body
from tests.apis.messages_events import attempt, block, delta, end, opened, start, stop
from tests.conftest import DATA

AGENT_CAPTURES = DATA / "captures" / "vllm-0.32.0-agent-apis"


def _same_but_ids(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with what differs between two requests (the id, a block's signature)
    blanked."""
    return {**body, "id": "-", "content": [
        {**b, "signature": "-"} if "signature" in b else b for b in body["content"]]}


@pytest.mark.parametrize("name", ["messages_thinking_loop", "messages_thinking_disabled"])
def test_a_folded_stream_is_vllms_own_body(name: str) -> None:
    """vLLM's stream, folded, gives vLLM's non-streaming body for the same request: the
    same fields in the same order, nulls left out (only ids and signatures differ)."""
    parts = opened(stream=False)
    assert parts.fold is not None
    first = attempt(parts)
    assert first.feed((AGENT_CAPTURES / f"{name}.sse").read_bytes(), 1.0) == b""
    got = parts.fold.response()
    assert got.status == 200
    want = orjson.loads((AGENT_CAPTURES / f"{name}_nonstream.json").read_bytes())
    body = orjson.loads(got.body)
    assert list(body) == list(want)
    assert _same_but_ids(body) == _same_but_ids(want)


def test_blocks_in_stream_order_and_a_tool_calls_input_parsed() -> None:
    """Thinking (with its signature), text and tool use, in stream order; a tool call's
    streamed JSON becomes its ``input`` ({} when it does not parse)."""
    fold = MessagesFold()
    objs = [start(), block(0, "thinking"), delta(0, "thinking", "hm"),
            {"type": "content_block_delta",
             "delta": {"type": "signature_delta", "signature": "s1"}, "index": 0}, stop(0),
            block(1, "text"), delta(1, "text", "Use "), delta(1, "text", "a tool."), stop(1),
            {"type": "content_block_start", "content_block": {
                "type": "tool_use", "id": "t1", "name": "read", "input": {}}, "index": 2},
            delta(2, "input_json", '{"path": '), delta(2, "input_json", '"a.py"}'), stop(2),
            {"type": "content_block_start", "content_block": {
                "type": "tool_use", "id": "t2", "name": "cut", "input": {}}, "index": 3},
            delta(3, "input_json", '{"pa'), stop(3), *end("tool_use", 32, 9)]
    for obj in objs:
        fold.add(obj)
    assert fold.body()["content"] == [
        {"type": "thinking", "thinking": "hm", "signature": "s1"},
        {"type": "text", "text": "Use a tool."},
        {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a.py"}},
        {"type": "tool_use", "id": "t2", "name": "cut", "input": {}}]
    assert fold.body()["stop_reason"] == "tool_use"


def test_no_block_is_one_empty_text_block_and_an_error_is_a_500() -> None:
    """A message without blocks has one empty text block; an error event makes the
    response a 500 carrying it."""
    fold = MessagesFold()
    for obj in [start(), *end("end_turn", 32, 0)]:
        fold.add(obj)
    assert fold.body()["content"] == [{"type": "text", "text": ""}]
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    fold.add(error)
    assert fold.response() == Body(500, orjson.dumps(error))
