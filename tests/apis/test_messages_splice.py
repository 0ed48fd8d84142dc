"""The Anthropic Messages splicer (``sidecar.apis.messages.splice``): what the client sees
of a cut, of the ladder's end and of an error after the response started."""

from __future__ import annotations

import re

import orjson

from sidecar.apis.messages.splice import MARK_PREFIX, signature_mark
from sidecar.core.attempt import Totals
from sidecar.errors import UpstreamError
from tests.apis.messages_events import (
    VERDICT,
    WALL,
    attempt,
    block,
    delta,
    opened,
    sse,
    start,
)

COMMENT = re.compile(rb"^: runaway detector=periodic .* action=reissue:no-think attempt=0\n\n")


def _events(body: bytes) -> list[dict[str, object]]:
    return [orjson.loads(data) for data in re.findall(rb"^data: (.*)$", body, re.M)]


def test_a_cut_thinking_block_is_signed_with_the_sidecars_mark() -> None:
    """The open thinking block gets a ``signature_delta`` with a signature the sidecar
    chose (32 hex characters, its prefix first), then its stop; the signature is the
    exchange's mark, taken once."""
    parts = opened()
    first = attempt(parts)
    first.feed(sse([start(), block(0, "thinking"), delta(0, "thinking", " loop")]), 1.0)
    out = parts.splicer.cut(first, VERDICT, "reissue:no-think", 0, [0], wall=WALL)
    assert COMMENT.match(out)
    mark = signature_mark("r", 0)
    assert re.fullmatch(MARK_PREFIX + "[0-9a-f]{24}", mark)
    assert _events(out) == [
        {"type": "content_block_delta", "delta": {"type": "signature_delta",
                                                  "signature": mark}, "index": 0},
        {"type": "content_block_stop", "index": 0}]
    assert parts.splicer.take_marks() == [mark]
    assert parts.splicer.take_marks() == []


def test_a_text_block_cut_inside_an_inline_think_is_closed_first() -> None:
    """A text block left inside ``<think>`` gets ``</think>`` before its stop, no mark."""
    parts = opened()
    first = attempt(parts)
    first.feed(sse([start(), block(0, "text"), delta(0, "text", "<think>loop")]), 1.0)
    out = parts.splicer.cut(first, VERDICT, "reissue:no-think", 0, [0], wall=WALL)
    assert _events(out) == [
        {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "</think>"},
         "index": 0},
        {"type": "content_block_stop", "index": 0}]
    assert parts.splicer.take_marks() == []


def test_a_cut_with_no_block_open_is_only_the_comment() -> None:
    """Nothing to close: the client gets the comment alone."""
    parts = opened()
    first = attempt(parts)
    first.feed(sse([start()]), 1.0)
    out = parts.splicer.cut(first, VERDICT, "reissue:no-think", 0, [0], wall=WALL)
    assert COMMENT.fullmatch(out)


def test_the_ladders_end_is_a_whole_message_even_before_it_started() -> None:
    """Cut before any event reached the client, the end still gives one message: a
    ``message_start`` of the sidecar's, then ``max_tokens`` with every attempt's usage."""
    parts = opened()
    first = attempt(parts)
    out = parts.splicer.end(first, VERDICT, "finish", 1, [0], Totals(40, 90, 80),
                            usage=True, elapsed=3.0, wall=WALL)
    events = _events(out)
    assert [e["type"] for e in events] == ["message_start", "message_delta", "message_stop"]
    assert events[0]["message"] == {
        "id": "chatcmpl-r", "type": "message", "role": "assistant", "content": [],
        "model": "m", "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 40, "output_tokens": 0}}
    assert events[1] == {"type": "message_delta",
                         "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
                         "usage": {"input_tokens": 40, "output_tokens": 90}}


def test_the_end_after_a_started_message_closes_the_open_block() -> None:
    """The client has a message and an open thinking block: no second ``message_start``;
    the block is signed and stopped before the message ends."""
    parts = opened()
    first = attempt(parts)
    first.feed(sse([start(), block(0, "thinking"), delta(0, "thinking", " loop")]), 1.0)
    out = parts.splicer.end(first, VERDICT, "finish", 0, [0], first.totals(), usage=True,
                            elapsed=1.0, wall=WALL)
    assert [e["type"] for e in _events(out)] == [
        "content_block_delta", "content_block_stop", "message_delta", "message_stop"]


def test_an_error_after_the_start_is_an_error_event() -> None:
    """An upstream error once the response started travels as Anthropic's error event."""
    out = opened().splicer.error(UpstreamError("gone"))
    assert out == (b'event: error\ndata: {"type":"error","error":{"type":"api_error",'
                   b'"message":"gone"}}\n\n')
