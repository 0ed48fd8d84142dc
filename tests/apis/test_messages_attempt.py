"""One upstream attempt of Anthropic Messages (``sidecar.apis.messages.attempt``): what it
reads of each event, what it forwards, and how a reissue's events reach the client."""

from __future__ import annotations

import re

import orjson
import pytest

from sidecar.core.events import StreamError, Usage
from sidecar.errors import UpstreamProtocolError
from tests.apis.messages_events import (
    VERDICT,
    WALL,
    attempt,
    block,
    delta,
    end,
    opened,
    sse,
    start,
    stop,
)

HEALTHY = [start(), block(0, "thinking"), delta(0, "thinking", " so"),
           delta(0, "thinking", " then"), delta(0, "thinking", " done"), stop(0),
           block(1, "text"), delta(1, "text", "Fix"), delta(1, "text", " it."), stop(1),
           *end("end_turn", 32, 5)]


def _events(body: bytes) -> list[dict[str, object]]:
    return [orjson.loads(data) for data in re.findall(rb"^data: (.*)$", body, re.M)]


@pytest.mark.parametrize("split", [False, True])
def test_a_first_attempt_forwards_its_bytes_and_counts_each_delta(split: bool) -> None:
    """The first attempt to a streaming client sends the upstream's bytes unchanged,
    whole or one event per read; each delta event is one token, on its channel, and the
    final usage and stop reason end the choice."""
    body = sse(HEALTHY)
    first = attempt(opened())
    reads = re.findall(rb".*?\n\n", body, re.S) if split else [body]
    assert b"".join(first.feed(read, 1.0) for read in reads) + first.eof(1.0) == body
    state = first.choices[0]
    assert (state.thinking_tokens, state.content_tokens) == (3, 2)
    assert first.usage == Usage(32, 5, None, final=True)
    assert first.done
    assert first.finished_choices == frozenset({0})
    assert not first.truncated


def test_answer_text_before_any_thinking_block_goes_through_the_think_splitter() -> None:
    """A server without a reasoning parser writes the reasoning inline in text deltas:
    the part inside ``<think>`` is reasoning, and a cut there leaves it open."""
    first = attempt(opened())
    first.feed(sse([start(), block(0, "text"), delta(0, "text", "<think>loop"),
                    delta(0, "text", " loop")]), 1.0)
    assert first.choices[0].thinking_tokens == 2
    assert first.inline_open(0)
    first.feed(sse([delta(0, "text", "</think>Answer")]), 1.0)
    assert not first.inline_open(0)
    assert first.choices[0].content_tokens == 1


def test_a_tool_call_opens_the_choice_and_an_error_event_ends_the_stream() -> None:
    """``input_json_delta`` is a tool call; an ``error`` event is the stream's error."""
    first = attempt(opened())
    first.feed(sse([start(), block(0, "tool_use"), delta(0, "input_json", '{"a"')]), 1.0)
    assert 0 in first.choices
    first.feed(sse([{"type": "error", "error": {"type": "overloaded_error",
                                                "message": "busy"}}]), 1.0)
    assert first.error == StreamError("busy", None)
    assert first.done


@pytest.mark.parametrize("body", [
    b"event: x\ndata: {not json\n\n",
    b"data: [1, 2]\n\n",
    b'data: {"type": "content_block_delta", "delta": "text", "index": 0}\n\n',
])
def test_bytes_that_are_not_a_messages_stream_fail_the_attempt(body: bytes) -> None:
    """Invalid JSON, an event that is no object, a delta event without a delta object."""
    with pytest.raises(UpstreamProtocolError):
        attempt(opened()).feed(body, 1.0)


def test_a_reissue_continues_the_clients_one_message() -> None:
    """After a cut in a thinking block, the reissue's ``message_start`` is dropped, its
    blocks follow the client's, and its final usage adds the cut attempt's tokens."""
    parts = opened()
    first = attempt(parts)
    client = first.feed(sse([start(), block(0, "thinking"), delta(0, "thinking", " loop"),
                             delta(0, "thinking", " loop")]), 1.0)
    client += parts.splicer.cut(first, VERDICT, "reissue:no-think", 0, [0], wall=WALL)
    second = attempt(parts, 1, first.totals())
    client += second.feed(sse([start(prompt=30, msg_id="chatcmpl-2"), block(0, "text"),
                               delta(0, "text", "Fix it."), stop(0),
                               *end("end_turn", 30, 3)]), 2.0)
    events = _events(client)
    assert [e["type"] for e in events] == [
        "message_start", "content_block_start", "content_block_delta", "content_block_delta",
        "content_block_delta", "content_block_stop", "content_block_start",
        "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    assert events[0] == start()
    assert [e["index"] for e in events if "index" in e] == [0, 0, 0, 0, 0, 1, 1, 1]
    assert events[-2]["usage"] == {"input_tokens": 30 + 32, "output_tokens": 3 + 2}
    # The sidecar's own events are written as vLLM writes them: compact, index last.
    assert (b'data: {"type":"content_block_start","content_block":{"type":"text","text":""},'
            b'"index":1}\n\n') in client


def test_a_non_streaming_client_gets_nothing_until_the_fold_is_read() -> None:
    """Every event goes to the fold, the cut's closing events too; the body is one
    message with both attempts' blocks and the summed usage."""
    parts = opened(stream=False)
    assert parts.fold is not None
    first = attempt(parts)
    assert first.feed(sse([start(), block(0, "thinking"), delta(0, "thinking", " loop")]),
                      1.0) == b""
    assert parts.splicer.cut(first, VERDICT, "reissue:no-think", 0, [0], wall=WALL) == b""
    second = attempt(parts, 1, first.totals())
    assert second.feed(sse([start(prompt=30), block(0, "text"), delta(0, "text", "Done."),
                            stop(0), *end("end_turn", 30, 2)]), 2.0) == b""
    body = orjson.loads(parts.fold.response().body)
    assert [b["type"] for b in body["content"]] == ["thinking", "text"]
    assert body["content"][0]["thinking"] == " loop"
    assert body["content"][0]["signature"] == parts.splicer.take_marks()[0]
    assert (body["stop_reason"], body["usage"]) == ("end_turn", {"input_tokens": 62,
                                                                 "output_tokens": 3})
