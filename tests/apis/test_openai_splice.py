"""The OpenAI splicer: what a chat-completions or completions client sees of a cut, the
ladder's end and an error, streamed or folded into one body (pure)."""

from __future__ import annotations

import orjson

from detectors import Evidence, Verdict
from sidecar.apis.openai.fold import OpenAIFold
from sidecar.apis.openai.splice import Head, OpenAISplicer, rewrite
from sidecar.core.attempt import Totals, text_mark
from sidecar.errors import UpstreamTimeoutError
from tests.attempts import chunk_attempt

VERDICT = Verdict("periodic", "thinking", "loop", Evidence("x", 106, 9), 213, 1024)
WALL = 1_767_225_600.0
MARK = (b": runaway detector=periodic channel=thinking at_token=213 period=106 count=9 "
        b"action=reissue:no-think attempt=0\n\n")


def events(data: bytes) -> list[bytes]:
    return [e + b"\n\n" for e in data.split(b"\n\n") if e]


def test_a_cut_marks_and_closes_inline_blocks() -> None:
    """A cut writes one comment line and, for each choice left inside an inline <think>,
    a content chunk that closes it, under the first attempt's identity."""
    splicer = OpenAISplicer("chat", None, request_id="r", model="m")
    splicer.head = Head("chatcmpl-1", 7, "served", "chat")
    attempt = chunk_attempt("chat")
    attempt.feed(b'data: {"id":"c","choices":[{"index":1,"delta":{"content":"<think>x"}}]}\n\n'
                 b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"ok"}}]}\n\n', 0.1)
    out = splicer.cut(attempt, VERDICT, "reissue:no-think", 0, [0, 1], wall=WALL)
    assert out.startswith(MARK)
    chunk = orjson.loads(out[len(MARK) + 6 : -2])
    assert (chunk["id"], chunk["created"]) == ("chatcmpl-1", 7)
    assert chunk["choices"] == [{"index": 1, "delta": {"content": "</think>"}, "logprobs": None,
                                 "finish_reason": None, "token_ids": None}]


def test_a_cut_before_any_chunk_makes_the_identity_from_the_request() -> None:
    """No chunk arrived before the cut: the id is made from the request id (``chatcmpl-``
    or ``cmpl-``), ``created`` is the time of the cut, the model the requested one."""
    chat = OpenAISplicer("chat", None, request_id="abc", model="qwen3")
    chat.cut(chunk_attempt("chat"), VERDICT, "reissue:no-think", 0, [], wall=WALL)
    assert chat.head == Head("chatcmpl-abc", int(WALL), "qwen3", "chat")
    assert OpenAISplicer("completions", None, request_id="abc", model=None).ensure_head(
        WALL).id == "cmpl-abc"


def test_the_end_of_a_stream() -> None:
    """The ladder's end: the marker, a ``length`` finish per open choice, the usage of
    every attempt when the client asked for usage, then [DONE]."""
    splicer = OpenAISplicer("completions", None, request_id="r", model="m")
    splicer.head = Head("cmpl-1", 7, "m", "completions")
    out = splicer.end(chunk_attempt("completions"), VERDICT, "finish", 1, [0, 2],
                      Totals(10, 50, 40), usage=True, elapsed=1.0, wall=WALL)
    parts = events(out)
    assert parts[0].startswith(b": runaway detector=periodic")
    assert b"action=finish attempt=1" in parts[0]
    finishes = [orjson.loads(p[6:])["choices"][0] for p in parts[1:3]]
    assert [(c["index"], c["finish_reason"], c["text"]) for c in finishes] == [
        (0, "length", ""), (2, "length", "")]
    usage = orjson.loads(parts[3][6:])
    assert usage["choices"] == []
    assert usage["usage"] == {"prompt_tokens": 10, "total_tokens": 60, "completion_tokens": 50,
                              "completion_tokens_details": {"reasoning_tokens": 40}}
    assert parts[4] == b"data: [DONE]\n\n"
    quiet = splicer.end(chunk_attempt("completions"), VERDICT, "cut", 0, [0], Totals(),
                        usage=False, elapsed=1.0, wall=WALL)
    assert b'"usage"' not in quiet


def test_a_non_streaming_body_gets_the_same_end_and_no_marker() -> None:
    """With a fold, the cut writes nothing (no marker, no </think>: the body carries the
    X-Runaway headers) and the end sets the open choices' finish and the summed usage."""
    fold = OpenAIFold("chat")
    splicer = OpenAISplicer("chat", fold, request_id="r", model="qwen3")
    attempt = chunk_attempt("chat", aggregate=True)
    assert splicer.cut(attempt, VERDICT, "reissue:no-think", 0, [0], wall=WALL) == b""
    assert splicer.end(attempt, VERDICT, "finish", 1, [0], Totals(3, 8, 8), usage=True,
                       elapsed=1.0, wall=WALL) == b""
    body = orjson.loads(fold.response().body)
    assert (body["id"], body["model"]) == ("chatcmpl-r", "qwen3")
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 8


def test_an_error_after_the_response_started() -> None:
    """An error event with vLLM's error object, then [DONE]."""
    out = OpenAISplicer("chat", None, request_id="r", model="m").error(
        UpstreamTimeoutError("no bytes from upstream for 5 s"))
    first, done = events(out)
    assert orjson.loads(first[6:]) == {"error": {
        "message": "no bytes from upstream for 5 s", "type": "GatewayTimeoutError",
        "param": None, "code": 504}}
    assert done == b"data: [DONE]\n\n"


def test_rewrite_maps_identity_and_choices() -> None:
    """A reissued chunk takes the client's identity and choice indices; role-only chunks
    are dropped; after salvage the reasoning field is the answer."""
    head = Head("chatcmpl-1", 7, "served", "chat")
    chunk = {"id": "chatcmpl-2", "created": 9, "model": "other", "choices": [
        {"index": 0, "delta": {"reasoning": "Fix"}, "finish_reason": None}]}
    out = rewrite(head, chunk, {0: 3}, reasoning_to_content=True)
    assert out is not None
    assert (out["id"], out["created"], out["model"]) == ("chatcmpl-1", 7, "served")
    assert out["choices"] == [{"index": 3, "delta": {"content": "Fix"}, "finish_reason": None}]
    role = {"id": "x", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                    "finish_reason": None}]}
    assert rewrite(head, role, {}, reasoning_to_content=False) is None


def test_each_cut_marks_the_reasoning_each_choice_holds() -> None:
    """A cut marks what each client choice got of reasoning so far, the way a client
    sending it back is recognized: by its length and first characters."""
    splicer = OpenAISplicer("chat", None, request_id="r", model="m")
    attempt = chunk_attempt("chat")
    pieces = ["Let me think. ", "Hmm, again. " * 40]
    for piece in pieces:
        attempt.feed(b"data: " + orjson.dumps({"id": "c", "choices": [
            {"index": 0, "delta": {"reasoning": piece}}]}) + b"\n\n", 0.1)
    splicer.cut(attempt, VERDICT, "reissue:no-think", 0, [0], wall=WALL)
    assert splicer.take_marks() == [text_mark("".join(pieces))]
    assert splicer.take_marks() == []
