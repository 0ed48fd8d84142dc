"""The OpenAI Responses splicer (``sidecar.apis.responses.splice``): what the client sees
of a cut, of the ladder's end and of an error after the response started."""

from __future__ import annotations

import re
from typing import Any

import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sidecar.apis.responses.splice import ResponsesSplicer
from sidecar.core.attempt import Totals
from sidecar.core.kept import MAX_KEPT_REASONING
from sidecar.errors import UpstreamError
from tests.apis.responses_events import (
    VERDICT,
    WALL,
    attempt,
    head,
    message,
    opened,
    reasoning,
    sse,
)

COMMENT = re.compile(rb"^: runaway detector=periodic .* action=reissue:no-think attempt=0\n\n")


def _events(body: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(data) for data in re.findall(rb"^data: (.*)$", body, re.M)]


def test_a_cut_reasoning_item_is_closed_as_its_server_would_and_marked() -> None:
    """The open reasoning item gets its ``reasoning_text.done``, ``content_part.done`` and
    ``output_item.done`` (status ``incomplete``, its text so far), numbered on from the
    upstream's last number; its id is the exchange's mark."""
    parts = opened()
    first = attempt(parts)
    first.feed(sse([*head(), *reasoning(0, "rs_1", " loop", " again")]), 1.0)
    out = parts.splicer.cut(first, VERDICT, "reissue:no-think", 0, [0], wall=WALL)
    assert COMMENT.match(out)
    events = _events(out)
    text = " loop again"
    assert events == [
        {"content_index": 0, "item_id": "rs_1", "output_index": 0, "sequence_number": 6,
         "text": text, "type": "response.reasoning_text.done"},
        {"content_index": 0, "item_id": "rs_1", "output_index": 0,
         "part": {"text": text, "type": "reasoning_text"}, "sequence_number": 7,
         "type": "response.content_part.done"},
        {"item": {"id": "rs_1", "summary": [], "type": "reasoning",
                  "content": [{"text": text, "type": "reasoning_text"}],
                  "encrypted_content": None, "status": "incomplete"},
         "output_index": 0, "sequence_number": 8, "type": "response.output_item.done"}]
    assert parts.splicer.take_marks() == ["rs_1"]


def test_a_message_cut_inside_an_inline_think_is_closed_first() -> None:
    """A message item left inside ``<think>`` gets a ``</think>`` delta, and its text as
    done carries it."""
    parts = opened()
    first = attempt(parts)
    first.feed(sse([*head(), *message(0, "msg_1", "<think>loop")]), 1.0)
    out = parts.splicer.cut(first, VERDICT, "reissue:no-think", 0, [0], wall=WALL)
    events = _events(out)
    assert [e["type"] for e in events] == [
        "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done"]
    assert events[0]["delta"] == "</think>"
    assert events[1]["text"] == "<think>loop</think>"
    assert events[3]["item"]["status"] == "incomplete"
    assert parts.splicer.take_marks() == []


def test_a_server_that_numbers_nothing_gets_no_numbers() -> None:
    """llama.cpp numbers no events and indexes no items: neither do the sidecar's."""
    parts = opened()
    first = attempt(parts)
    first.feed(sse([*head(), *reasoning(0, "rs_1", " loop")], numbered=False), 1.0)
    out = parts.splicer.cut(first, VERDICT, "reissue:no-think", 0, [0], wall=WALL)
    events = _events(out)
    assert len(events) == 3
    assert not [e for e in events if "sequence_number" in e or "output_index" in e]


def test_the_ladders_end_completes_the_response_as_incomplete() -> None:
    """The end closes the open item and completes the response: the client's identity,
    status ``incomplete`` for ``max_output_tokens``, every item, every attempt's usage."""
    parts = opened()
    first = attempt(parts)
    first.feed(sse([*head(), *reasoning(0, "rs_1", " loop")]), 1.0)
    out = parts.splicer.end(first, VERDICT, "finish", 0, [0], Totals(32, 50, 49),
                            usage=True, elapsed=2.0, wall=WALL)
    final = _events(out)[-1]
    assert (final["type"], final["sequence_number"]) == ("response.completed", 8)
    response = final["response"]
    assert (response["id"], response["status"], response["incomplete_details"]) == (
        "resp_1", "incomplete", {"reason": "max_output_tokens"})
    assert [item["id"] for item in response["output"]] == ["rs_1"]
    assert response["usage"]["input_tokens"] == 32
    assert response["usage"]["output_tokens"] == 50
    assert response["usage"]["output_tokens_details"]["reasoning_tokens"] == 49


def test_the_end_before_any_event_makes_a_response_of_its_own() -> None:
    """Cut before the client got anything: a response object of the sidecar's own."""
    parts = opened()
    out = parts.splicer.end(attempt(parts), VERDICT, "finish", 1, [0], Totals(32, 9, 9),
                            usage=True, elapsed=1.0, wall=WALL)
    (final,) = _events(out)
    assert (final["response"]["id"], final["response"]["created_at"]) == ("resp_r", int(WALL))
    assert "sequence_number" not in final


def test_an_error_after_the_start_is_a_numbered_error_event() -> None:
    """An upstream error once the response started is an ``error`` event, numbered on."""
    parts = opened()
    first = attempt(parts)
    first.feed(sse(head()), 1.0)
    parts.splicer.cut(first, VERDICT, "reissue:no-think", 0, [0], wall=WALL)
    (error,) = _events(parts.splicer.error(UpstreamError("gone")))
    assert error == {"code": "502", "message": "gone", "param": None, "sequence_number": 2,
                     "type": "error"}


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(1, 6000), max_size=150), opened=st.integers(0, 150))
@example(sizes=[1000] * 150, opened=0)
@example(sizes=[1000] * 150, opened=70)
@example(sizes=[1] * 100 + [40000] + [1] * 40, opened=0)
def test_the_open_items_text_keeps_deltas_until_the_bound(sizes: list[int],
                                                          opened: int) -> None:
    """The splicer keeps each delta of the open item while the deltas before it hold fewer
    than ``MAX_KEPT_REASONING`` characters, however many came, and a new item starts over."""
    splicer = ResponsesSplicer(None, request_id="r", model="m", echo={})
    kept = ""
    for i, size in enumerate(sizes):
        if i == opened:
            splicer.seen({"type": "response.output_item.added", "output_index": 0,
                          "item": {"type": "reasoning", "id": "rs_1"}})
            kept = ""
        text = chr(ord("a") + i % 26) * size
        splicer.kept.keep(text)
        if len(kept) < MAX_KEPT_REASONING:
            kept += text
    assert splicer.kept.text() == kept
