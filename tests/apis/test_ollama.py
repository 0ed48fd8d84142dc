"""Ollama's native API as a wire API: the line model, the fold of a non-streaming body,
the splicer's lines and the request bodies (pure)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from detectors import DetectorConfig, Evidence, Verdict
from sidecar.apis.ollama.api import OLLAMA_CHAT, OLLAMA_GENERATE, no_think_body
from sidecar.apis.ollama.attempt import LineModel
from sidecar.apis.ollama.fold import OllamaFold
from sidecar.apis.ollama.splice import OllamaSplicer, summed_final
from sidecar.core.attempt import AttemptSpec, Totals
from sidecar.core.events import Finish, MalformedChunk, StreamError, TextDelta, ToolCallDelta, Usage
from sidecar.core.wire import Body
from sidecar.dialects import DIALECTS
from sidecar.errors import UpstreamError

VERDICT = Verdict("periodic", "thinking", "loop", Evidence("x", 4, 3), 10, 40)
WALL = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def line(**fields: Any) -> bytes:
    return orjson.dumps({"model": "qwen3", "created_at": "t", **fields})


def test_chat_lines_become_events() -> None:
    """message.thinking is reasoning, message.content the answer, tool calls and the done
    line (usage, finish) come through; each text line is one token."""
    model = LineModel("chat")
    assert model.feed(line(message={"role": "assistant", "thinking": "hm"}, done=False)) == [
        TextDelta(0, "thinking", "hm", 1)]
    assert model.feed(line(message={"role": "assistant", "content": "ok"}, done=False)) == [
        TextDelta(0, "content", "ok", 1)]
    calls = [{"function": {"name": "f", "arguments": {}}}]
    assert model.feed(line(message={"role": "assistant", "content": "", "tool_calls": calls},
                           done=False)) == [ToolCallDelta(0, calls)]
    assert model.feed(line(message={"role": "assistant", "content": ""}, done=True,
                           done_reason="length", prompt_eval_count=7, eval_count=9)) == [
        Usage(7, 9, None, final=True), Finish(0, "length")]


def test_generate_reads_inline_think_tags_without_a_thinking_field() -> None:
    """A model that ignores think=false writes its reasoning into ``response`` between
    <think> tags: the tags route it to the thinking channel, split anywhere."""
    model = LineModel("generate")
    events = model.feed(line(response="<thi", done=False))
    events += model.feed(line(response="nk>loop", done=False))
    assert model.inline_open()
    events += model.feed(line(response="</think>answer", done=False))
    assert [(e.channel, e.text) for e in events if isinstance(e, TextDelta)] == [
        ("thinking", "loop"), ("content", "answer")]
    assert not model.inline_open()


@pytest.mark.parametrize("data", [b"not json", b"[1]", b'"x"'])
def test_a_line_that_is_not_an_object_is_malformed(data: bytes) -> None:
    """Anything but a JSON object raises MalformedChunk."""
    with pytest.raises(MalformedChunk):
        LineModel("chat").feed(data)


def test_an_error_line_is_a_stream_error() -> None:
    """``{"error": ...}`` after output started is the stream's end."""
    assert LineModel("chat").feed(b'{"error":"boom"}') == [StreamError("boom", None)]


def test_the_fold_joins_text_and_keeps_the_last_line() -> None:
    """A non-streaming body: the last line's fields, the text and thinking joined, tool
    calls gathered; an error line makes it a 500 with the error."""
    fold = OllamaFold("chat")
    fold.add(orjson.loads(line(message={"role": "assistant", "thinking": "a"}, done=False)))
    fold.add(orjson.loads(line(message={"role": "assistant", "content": "b"}, done=False)))
    fold.add(orjson.loads(line(message={"role": "assistant", "content": "c"}, done=True,
                               eval_count=2)))
    answer = fold.response()
    assert (answer.status, answer.charset) == (200, "utf-8")
    assert orjson.loads(answer.body) == {
        "model": "qwen3", "created_at": "t", "done": True, "eval_count": 2,
        "message": {"role": "assistant", "content": "bc", "thinking": "a"}}
    fold.add({"error": "gone"})
    assert fold.response() == Body(500, b'{"error":"gone"}')


def test_splicer_lines_for_a_stream_and_for_a_fold() -> None:
    """The splicer writes a ``</think>`` line for an inline block left open, one final
    ``done: true`` line with done_reason length and the counters of every attempt, and an
    error line; for a non-streaming client the same lines go to its fold."""
    facts = OLLAMA_GENERATE.facts({"model": "asked"})
    opened = OLLAMA_GENERATE.open(facts, DIALECTS["ollama"], request_id="r", model="asked")
    splicer = opened.splicer
    assert isinstance(splicer, OllamaSplicer)
    closed_block = opened.attempt(AttemptSpec(0, DetectorConfig(), 0.0, 0.0))
    assert splicer.cut(closed_block, VERDICT, "reissue:no-think", 0, [0], wall=WALL) == b""
    inline = opened.attempt(AttemptSpec(0, DetectorConfig(), 0.0, 0.0))
    inline.feed(orjson.dumps({"response": "<think>hm", "done": False}) + b"\n", 0.1)
    closed = orjson.loads(splicer.cut(inline, VERDICT, "reissue:no-think", 0, [0], wall=WALL))
    assert closed == {"model": "asked", "created_at": "2026-01-01T00:00:00Z",
                      "response": "</think>", "done": False}
    splicer.see_model("served")
    end = orjson.loads(splicer.end(inline, VERDICT, "finish", 1, [0], Totals(5, 40, 30),
                                   usage=True, elapsed=2.0, wall=WALL))
    assert (end["model"], end["done"], end["done_reason"]) == ("served", True, "length")
    assert (end["prompt_eval_count"], end["eval_count"], end["total_duration"]) == (
        5, 40, 2_000_000_000)
    assert splicer.error(UpstreamError("gone")) == b'{"error":"gone"}\n'
    opened = OLLAMA_CHAT.open(OLLAMA_CHAT.facts({"stream": False}), DIALECTS["ollama"],
                              request_id="r", model="asked")
    folded, fold = opened.splicer, opened.fold
    assert fold is not None
    chat = opened.attempt(AttemptSpec(0, DetectorConfig(), 0.0, 0.0))
    chat.feed(orjson.dumps({"message": {"role": "assistant", "content": "<think>x"},
                            "done": False}) + b"\n", 0.1)
    assert folded.cut(chat, VERDICT, "reissue:no-think", 0, [0], wall=WALL) == b""
    assert folded.end(chat, VERDICT, "finish", 1, [0], Totals(5, 40, 30), usage=True,
                      elapsed=2.0, wall=WALL) == b""
    body = orjson.loads(fold.response().body)
    assert body["message"]["content"] == "<think>x</think>"
    assert (body["done_reason"], body["eval_count"]) == ("length", 40)


def test_a_reissue_line_carries_the_clients_model_and_summed_counters() -> None:
    """A reissue (on a fallback model) shows the first attempt's model; its last line adds
    the earlier attempts' tokens and wall time."""
    facts = OLLAMA_CHAT.facts({"model": "big"})
    opened = OLLAMA_CHAT.open(facts, DIALECTS["ollama"], request_id="r", model="big")
    first = opened.attempt(AttemptSpec(0, DetectorConfig(), 0.0, 0.0))
    first.feed(line(message={"role": "assistant", "thinking": "x"}, done=False) + b"\n", 0.5)
    spec = AttemptSpec(1, DetectorConfig(), 2.0, 0.0, earlier=Totals(7, 30, 30), step="no-think")
    reissue = opened.attempt(spec)
    out = reissue.feed(orjson.dumps({"model": "small", "created_at": "t", "message": {
        "role": "assistant", "content": ""}, "done": True, "prompt_eval_count": 7,
        "eval_count": 3, "total_duration": 10, "eval_duration": 5}) + b"\n", 2.5)
    final = orjson.loads(out)
    assert final["model"] == "qwen3"
    assert (final["prompt_eval_count"], final["eval_count"]) == (14, 33)
    assert (final["total_duration"], final["eval_duration"]) == (2_000_000_010, 2_000_000_005)
    assert summed_final({"eval_count": "x"}, prompt_tokens=0, completion_tokens=2,
                        unknown_prompts=0, earlier_seconds=0)["eval_count"] == 2


def test_request_bodies() -> None:
    """Thinking off is think=false (think=low for gpt-oss), always streamed upstream, on
    the fallback model when asked; the client's own think is what the policy reads."""
    rules = DIALECTS["ollama"].native_thinking_off
    assert no_think_body({"model": "qwen3", "stream": False}, rules) == {
        "model": "qwen3", "stream": True, "think": False}
    assert no_think_body({"model": "gpt-oss:20b"}, rules)["think"] == "low"
    assert no_think_body({"model": "qwen3"}, rules, model="small")["model"] == "small"
    assert OLLAMA_GENERATE.first_body({"model": "m", "stream": False},
                                      OLLAMA_GENERATE.facts({"stream": False})) == {
        "model": "m", "stream": True}
    assert OLLAMA_CHAT.first_body({"model": "m"}, OLLAMA_CHAT.facts({})) is None
    assert [OLLAMA_CHAT.client_thinking({"think": v}) for v in (True, False, "high")] == [
        "on", "off", "on"]
    assert OLLAMA_CHAT.client_thinking({"reasoning_effort": "none"}) is None
