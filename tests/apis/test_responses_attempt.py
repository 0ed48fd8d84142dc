"""One upstream attempt of OpenAI Responses (``sidecar.apis.responses.attempt``): what it
reads of each event, what it tells the splicer, and how hidden reasoning and a reissue's
events reach the client."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest

from sidecar.apis.responses.splice import ResponsesSplicer
from sidecar.core.events import Usage
from sidecar.errors import UpstreamProtocolError
from tests.apis.responses_events import (
    VERDICT,
    WALL,
    attempt,
    completed,
    head,
    item_done,
    message,
    opened,
    reasoning,
    sse,
    usage,
)

RS = {"id": "rs_1", "summary": [], "type": "reasoning",
      "content": [{"text": " a b", "type": "reasoning_text"}], "encrypted_content": None,
      "status": "completed"}
MSG = {"id": "msg_1", "content": [{"annotations": [], "text": "Fix it", "type": "output_text",
                                   "logprobs": None}],
       "role": "assistant", "status": "completed", "type": "message", "phase": None}
HEALTHY = [*head(), *reasoning(0, "rs_1", " a", " b"), item_done(0, RS),
           *message(1, "msg_1", "Fix", " it"), item_done(1, MSG),
           completed([RS, MSG], usage(32, 4, 2))]


def _events(body: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(data) for data in re.findall(rb"^data: (.*)$", body, re.M)]


def _reads(body: bytes) -> list[bytes]:
    return re.findall(rb".*?\n\n", body, re.S)


@pytest.mark.parametrize("split", [False, True])
def test_a_first_attempt_forwards_its_bytes_and_counts_each_delta(split: bool) -> None:
    """The first attempt to a streaming client sends the upstream's bytes unchanged,
    whole or one event per read; each delta event is one token on its channel, and
    ``response.completed`` gives the usage, the status and the end."""
    body = sse(HEALTHY)
    first = attempt(opened())
    reads = _reads(body) if split else [body]
    assert b"".join(first.feed(read, 1.0) for read in reads) + first.eof(1.0) == body
    state = first.choices[0]
    assert (state.thinking_tokens, state.content_tokens) == (2, 2)
    assert first.usage == Usage(32, 4, 2, final=True)
    assert first.done
    assert first.finished_choices == frozenset({0})


@pytest.mark.parametrize("split", [False, True])
def test_the_splicer_is_told_the_last_number_and_the_open_items_text(split: bool) -> None:
    """Through a template or a full parse, the attempt keeps every event's
    ``sequence_number`` and tells the splicer every delta of the open item (a tool call's
    arguments too). Reasoning deltas the attempt holds back reach the splicer when it
    settles, as a cut has it do."""
    parts = opened()
    splicer = parts.splicer
    assert isinstance(splicer, ResponsesSplicer)
    first = attempt(parts)
    body = sse([*head(), *reasoning(0, "rs_1", *[f" w{i}" for i in range(40)])])
    for read in _reads(body) if split else [body]:
        first.feed(read, 1.0)
    assert first.upstream_sequence == 43
    first.settle()
    assert splicer.kept.text() == "".join(f" w{i}" for i in range(40))
    call = {"item": {"id": "fc_1", "type": "function_call", "name": "read", "arguments": ""},
            "output_index": 1, "type": "response.output_item.added"}
    args = [{"delta": piece, "item_id": "fc_1", "output_index": 1,
             "type": "response.function_call_arguments.delta"} for piece in ('{"a"', ": 1}")]
    first.feed(sse([call, *args], first=44), 1.0)
    assert (first.upstream_sequence, splicer.kept.text()) == (46, '{"a": 1}')


def test_hidden_reasoning_is_watched_and_the_rest_renumbered() -> None:
    """With ``include_reasoning: false`` the reasoning is counted and watched, but its
    item's events are dropped and the rest numbered as the server would have."""
    parts = opened(hide=True)
    first = attempt(parts)
    out = first.feed(sse(HEALTHY), 1.0)
    assert first.choices[0].thinking_tokens == 2
    events = _events(out)
    assert not [e for e in events if "rs_1" in orjson.dumps(e).decode()]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert {e["output_index"] for e in events if "output_index" in e} == {0}
    assert events[-1]["response"]["output"] == [MSG]


def test_a_reissue_continues_the_clients_one_response() -> None:
    """After a cut, the reissue's ``created``/``in_progress`` are dropped, its numbers
    and items follow the client's, and its ``completed`` has the client's identity and
    ``reasoning`` field, every item and the usage of both attempts."""
    parts = opened()
    first = attempt(parts)
    client = first.feed(sse([*head(), *reasoning(0, "rs_1", " loop", " loop")]), 1.0)
    client += parts.splicer.cut(first, VERDICT, "reissue:no-think", 0, [0], wall=WALL)
    second = attempt(parts, 1, first.totals())
    client += second.feed(sse([*head("resp_2"), *message(0, "msg_1", "Fix", " it"),
                               item_done(0, MSG), completed([MSG], usage(30, 2, 0),
                                                            "resp_2")]), 2.0)
    events = _events(client)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events].count("response.created") == 1
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert [e["output_index"] for e in added] == [0, 1]
    final = events[-1]["response"]
    assert (final["id"], final["reasoning"]) == ("resp_1", {"effort": "high"})
    assert [item["id"] for item in final["output"]] == ["rs_1", "msg_1"]
    assert final["output"][0]["status"] == "incomplete"
    # The cut attempt had no usage yet: its prompt is billed as the reissue's (the same
    # prompt, sent again).
    assert final["usage"]["input_tokens"] == 30 + 30
    assert final["usage"]["output_tokens"] == 2 + 2
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] == 2
    assert final["usage"]["total_tokens"] == 64


def test_an_end_event_without_its_response_fails_the_attempt() -> None:
    """``response.completed`` must carry the response object."""
    with pytest.raises(UpstreamProtocolError):
        attempt(opened()).feed(sse([*head(), {"type": "response.completed"}]), 1.0)


def test_a_non_streaming_client_gets_the_final_response_as_its_body() -> None:
    """Nothing is sent while the stream runs; the body is the final response object,
    reasoning items with ``status: null`` as vLLM's non-streaming body has them."""
    parts = opened(stream=False)
    assert parts.fold is not None
    assert attempt(parts).feed(sse(HEALTHY), 1.0) == b""
    body = orjson.loads(parts.fold.response().body)
    assert [item["status"] for item in body["output"]] == [None, "completed"]
    assert body["usage"] == usage(32, 4, 2)
