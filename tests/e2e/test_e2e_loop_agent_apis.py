"""Real vLLM, thinking-loop model, the coding-agent APIs: Anthropic ``/v1/messages`` (the
``anthropic`` SDK) and OpenAI ``/v1/responses`` (the ``openai`` SDK) are cut, reissued with
thinking off and answered in one well-formed message or response; a disconnect stops vLLM;
a cut turn sent back in the history reaches vLLM cleaned.

The sidecar under test runs with the config written by scripts/e2e-vllm.sh (``[e2e]``):
mode enforce, ``reissue.ladder = ["no-think", "salvage"]`` (these APIs have no salvage
step), ``reissue.max_attempts = 3``, runaway memory on. Every request has a fresh user
message, so the memory recalls nothing.
"""

from __future__ import annotations

import time
from typing import Any

import anthropic.types
import openai.types.responses
import pytest

from sidecar.core.wire import CUT_NOTE

pytestmark = pytest.mark.vllm

MAX_TOKENS = 8000  # what a runaway left alone would burn (max_model_len is 8192)
#: Most tokens a cut attempt may cost upstream (see "How far below" in conftest.py).
CUT_BOUND = MAX_TOKENS // 2
#: The signature of every thinking block the sidecar cut starts with this.
MARK_PREFIX = "5ca1ab1e"
APIS = ("messages", "responses")
#: The least share of the tokens a client received that the usage of a cut exchange may
#: count: a cut attempt is counted a token per delta, and vLLM sometimes coalesces a few
#: tokens into one delta (seen: 221 counted of 232 received).
_USAGE_FLOOR = 0.8
REQUESTS = "runaway_sidecar_requests_total"


def _loop_prefix(text: str, loop: str) -> bool:
    """Whether ``text`` is (a prefix of) the loop sentence repeated: nothing else leaked in."""
    return bool(text) and (loop * (len(text) // len(loop) + 2)).startswith(text)


def _answer_tokens(node, api: str) -> int:
    """Tokens vLLM generates for the thinking-off answer (end of turn included)."""
    raw = node.agent_raw(api, "vllm", **node.agent_turn(api, "answer-size", 64), **_OFF[api])
    body = raw.json()
    return int(body["usage"]["output_tokens"])


#: What a client sends to turn thinking off, per API.
_OFF: dict[str, dict[str, Any]] = {
    "messages": {"thinking": {"type": "disabled"}},
    "responses": {"reasoning": {"effort": "none"}},
}


def _assembled(node, api: str, raw: bytes):
    """The stream as the client assembled it; its reasoning text and its answer."""
    if api == "messages":
        got = node.wire.MessagesStream.of(raw)
        return got, got.text("thinking"), got.text("text")
    got = node.wire.ResponsesStream.of(raw)
    return got, got.text("reasoning"), got.text("message")


@pytest.mark.parametrize("api", APIS)
def test_loop_stream_is_cut_and_answered(loop_node, api, e2e_report) -> None:
    """A streamed <think> loop is cut early, vLLM stops, and the thinking-off answer follows
    in one well-formed message or response (SDK-valid events, one start, one end)."""
    answer_tokens = _answer_tokens(loop_node, api)
    counted = loop_node.sidecar_metric(REQUESTS, route=api, outcome="reissued")
    before, _ = loop_node.wait_idle()
    started = time.monotonic()
    raw = loop_node.agent_raw(api, stream=True, **loop_node.agent_turn(api, f"{api}-cut"))
    seconds = time.monotonic() - started
    after, waited = loop_node.wait_idle(timeout=2.0)
    time.sleep(0.5)
    settled = loop_node.metrics()
    generated = after.generation_tokens - before.generation_tokens
    got, reasoning, answer = _assembled(loop_node, api, raw.body)
    e2e_report(f"{api}_loop_cut_and_reissue", seconds=round(seconds, 3),
               generation_tokens_delta=generated, idle_after_seconds=round(waited, 3),
               client_usage=got.usage, comments=got.parsed.comments)

    script = loop_node.script
    assert raw.status == 200
    assert raw.headers["content-type"].startswith("text/event-stream")
    assert got.problems == []
    assert loop_node.wire.actions(got.parsed.comments) == ["reissue:no-think"]
    assert _loop_prefix(reasoning, script["thinking_loop"])
    assert answer == script["answer"]
    if api == "messages":
        assert [b.kind for b in got.blocks] == ["thinking", "text"]
        assert got.blocks[0].signature.startswith(MARK_PREFIX)
        assert got.stop_reason == "end_turn"
        output, prompt = got.usage["output_tokens"], got.usage["input_tokens"]
    else:
        assert [(b.kind, b.status) for b in got.items] == [
            ("reasoning", "incomplete"), ("message", "completed")]
        assert got.final["status"] == "completed"
        assert got.final["reasoning"] is None  # the client's own field, not the reissue's
        output, prompt = got.usage["output_tokens"], got.usage["input_tokens"]
    # vLLM stopped the cut attempt at once and generated only it and the answer.
    assert after.running == 0
    assert settled.generation_tokens == after.generation_tokens
    assert answer_tokens < generated < CUT_BOUND
    # The usage adds both attempts and never exceeds what vLLM generated. These APIs carry
    # no running token count, so the cut attempt counts one token per delta the client got
    # (vLLM's own usage counts the reissue): exact unless vLLM coalesced tokens into one
    # delta, and then short by the extra tokens (see _USAGE_FLOOR).
    deltas = len(got.blocks[0].deltas if api == "messages" else got.items[0].deltas)
    assert output == deltas + answer_tokens <= generated
    if api == "responses":  # the reissue thought nothing: every reasoning token is the cut one's
        assert got.usage["output_tokens_details"]["reasoning_tokens"] == deltas
    sent = after.prompt_tokens - before.prompt_tokens
    if api == "messages":
        assert prompt == sent  # message_start told the first attempt's prompt
    else:
        # vLLM tells a response's usage only at its end, which the cut attempt never
        # reached: it is billed the reissue's prompt, longer by the thinking-off prefill.
        assert sent <= prompt <= sent + 8
    assert loop_node.sidecar_metric(REQUESTS, route=api, outcome="reissued") == counted + 1


def test_messages_sdk_stream_helper_gets_one_message(loop_node) -> None:
    """``messages.stream`` assembles the spliced stream into one message: the cut thinking
    block (the sidecar's signature) and the answer."""
    with loop_node.agent_client("messages").stream(model=loop_node.model,
                                **loop_node.agent_turn("messages", "helper")) as stream:
        texts = list(stream.text_stream)
        message = stream.get_final_message()
    loop_node.wait_idle(timeout=2.0)
    assert "".join(texts) == loop_node.script["answer"]
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].signature.startswith(MARK_PREFIX)
    assert _loop_prefix(message.content[0].thinking, loop_node.script["thinking_loop"])
    assert message.content[1].text == loop_node.script["answer"]
    assert message.stop_reason == "end_turn"


def test_responses_sdk_stream_helper_gets_one_response(loop_node) -> None:
    """``responses.stream`` assembles the spliced stream into one response: the cut
    reasoning item and the answer."""
    with loop_node.agent_client("responses").stream(model=loop_node.model,
                                 **loop_node.agent_turn("responses", "helper")) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        response = stream.get_final_response()
    loop_node.wait_idle(timeout=2.0)
    assert "".join(deltas) == loop_node.script["answer"]
    assert response.status == "completed"
    assert [(i.type, i.status) for i in response.output] == [
        ("reasoning", "incomplete"), ("message", "completed")]
    assert response.output_text == loop_node.script["answer"]


@pytest.mark.parametrize("api", APIS)
def test_loop_nonstreaming_gets_answer_and_headers(loop_node, api) -> None:
    """A non-streaming client gets the API's own body with the reissued answer, and the
    X-Runaway-* headers."""
    before, _ = loop_node.wait_idle()
    raw = loop_node.agent_raw(api, **loop_node.agent_turn(api, f"{api}-nonstream"))
    after, _ = loop_node.wait_idle(timeout=2.0)
    generated = after.generation_tokens - before.generation_tokens
    script = loop_node.script
    assert raw.status == 200
    assert raw.headers["content-type"].startswith("application/json")
    assert raw.headers.get("x-runaway-detector")
    assert raw.headers.get("x-runaway-action") == "reissue"
    assert raw.headers.get("x-runaway-attempts") == "2"
    if api == "messages":
        message = anthropic.types.Message.model_validate(raw.json())
        assert [b.type for b in message.content] == ["thinking", "text"]
        assert message.content[0].signature.startswith(MARK_PREFIX)
        reasoning, answer = message.content[0].thinking, message.content[1].text
        assert message.stop_reason == "end_turn"
        output = message.usage.output_tokens
    else:
        response = openai.types.responses.Response.model_validate(raw.json())
        assert response.status == "completed"
        assert [i.type for i in response.output] == ["reasoning", "message"]
        reasoning, answer = response.output[0].content[0].text, response.output_text
        output = response.usage.output_tokens
    assert _loop_prefix(reasoning, script["thinking_loop"])
    assert answer == script["answer"]
    # Both attempts are counted (the cut one a token per delta, see above).
    assert loop_node.count_tokens(answer) < output <= generated < CUT_BOUND
    assert output >= _USAGE_FLOOR * (loop_node.count_tokens(reasoning) +
                                     loop_node.count_tokens(answer))


@pytest.mark.parametrize("api", APIS)
def test_mode_cut_ends_at_the_length_limit(loop_node, api) -> None:
    """X-Runaway-Mode: cut ends the stream as a length stop, without an answer."""
    before, _ = loop_node.wait_idle()
    raw = loop_node.agent_raw(api, stream=True, headers={"X-Runaway-Mode": "cut"},
                              **loop_node.agent_turn(api, f"{api}-mode-cut"))
    after, _ = loop_node.wait_idle(timeout=2.0)
    got, reasoning, answer = _assembled(loop_node, api, raw.body)
    assert got.problems == []
    assert loop_node.wire.actions(got.parsed.comments) == ["cut"]
    assert _loop_prefix(reasoning, loop_node.script["thinking_loop"])
    assert answer == ""
    if api == "messages":
        assert got.stop_reason == "max_tokens"
    else:
        assert got.final["status"] == "incomplete"
        assert got.final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert after.generation_tokens - before.generation_tokens < CUT_BOUND


def _reasoning_events(api: str):
    kind = "thinking_delta" if api == "messages" else "response.reasoning_text.delta"

    def ready(events: list[Any]) -> bool:
        found = sum(1 for e in events if e.type == kind or (
            e.type == "content_block_delta" and e.delta.type == kind))
        return found >= 20

    return ready


@pytest.mark.parametrize("api", APIS)
def test_disconnect_during_first_attempt_stops_vllm(loop_node, api, e2e_report) -> None:
    """Closing the client stream while the first attempt thinks makes vLLM abort it in
    under a second (in the default mode, so the sidecar is watching)."""
    resource = loop_node.agent_client(api)

    def start(tag: str) -> Any:
        return resource.create(model=loop_node.model, stream=True,
                               **loop_node.agent_turn(api, tag))

    stream, before, tries = loop_node.midway_events(f"{api}-disconnect", start,
                                                    _reasoning_events(api))
    stream.close()
    after, waited = loop_node.wait_idle(timeout=1.0)
    time.sleep(0.5)
    settled = loop_node.metrics()
    assert settled.generation_tokens == after.generation_tokens
    # vLLM 0.32 does not count aborted requests: a request that ran on to its end would
    # show up as finished (``length``), a reissue as another finished request.
    assert settled.success == before.success
    assert after.generation_tokens - before.generation_tokens < CUT_BOUND
    e2e_report(f"{api}_disconnect_first_attempt", tries=tries,
               idle_after_seconds=round(waited, 3),
               generation_tokens_delta=after.generation_tokens - before.generation_tokens)


def _clean(api: str, history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``history`` with every reasoning replaced by the sidecar's note, as it should reach
    vLLM."""
    out = []
    for item in history:
        cleaned = item
        if api == "messages" and isinstance(item.get("content"), list):
            cleaned = {**item, "content": [{**b, "thinking": CUT_NOTE}
                                           if b["type"] == "thinking" else b
                                           for b in item["content"]]}
        elif api == "responses" and item.get("type") == "reasoning":
            cleaned = {**item, "content": [{"type": "reasoning_text", "text": CUT_NOTE}],
                       "summary": []}
        out.append(cleaned)
    return out


def _no_nulls(value: Any) -> Any:
    """``value`` without null fields (as the SDKs send their own objects back)."""
    if isinstance(value, dict):
        return {k: _no_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_no_nulls(v) for v in value]
    return value


@pytest.mark.parametrize("api", APIS)
def test_history_of_a_cut_turn_is_cleaned(loop_node, api, e2e_report) -> None:
    """The cut reasoning of a turn, sent back in the next request's history (a thinking
    block with the sidecar's signature, a reasoning item by its id), reaches vLLM as the
    sidecar's note: the prompt vLLM counted is exactly the cleaned one's, shorter than the
    looped one's."""
    first = loop_node.agent_turn(api, f"{api}-history")
    raw = loop_node.agent_raw(api, stream=True, **first)
    got, reasoning, answer = _assembled(loop_node, api, raw.body)
    assert answer == loop_node.script["answer"]
    assert loop_node.count_tokens(reasoning) >= 100
    follow_up = {"role": "user", "content": "Thanks. And if the list has one row?"}
    if api == "messages":
        thinking, text = got.blocks
        assert thinking.signature.startswith(MARK_PREFIX)
        turn = {"role": "assistant", "content": [
            {"type": "thinking", "thinking": thinking.text, "signature": thinking.signature},
            {"type": "text", "text": text.text}]}
        history = [*first["messages"], turn, follow_up]
        fields = {"messages": history, "max_tokens": 64}
    else:
        assert got.final["output"][0]["status"] == "incomplete"
        history = [*first["input"], *_no_nulls(got.final["output"]), follow_up]
        fields = {"input": history, "max_output_tokens": 64}
    history_key = "messages" if api == "messages" else "input"
    # The next turn asks with thinking off, so one attempt's prompt reaches vLLM.
    looped = loop_node.agent_raw(api, "vllm", **fields, **_OFF[api]).json()
    cleaned = loop_node.agent_raw(api, "vllm", **{**fields, history_key: _clean(api, history)},
                                  **_OFF[api]).json()
    counted = loop_node.sidecar_metric("runaway_sidecar_history_cleaned_total", route=api)
    before, _ = loop_node.wait_idle()
    second = loop_node.agent_raw(api, **fields, **_OFF[api])
    after, _ = loop_node.wait_idle(timeout=2.0)
    body = second.json()
    prompt = body["usage"]["input_tokens"]
    e2e_report(f"{api}_history_cleaned", prompt_tokens=prompt,
               looped_prompt_tokens=looped["usage"]["input_tokens"],
               cleaned_prompt_tokens=cleaned["usage"]["input_tokens"])

    assert second.status == 200
    if api == "messages":
        assert [b["type"] for b in body["content"]] == ["text"]
        assert body["content"][0]["text"] == loop_node.script["answer"]
    else:
        assert body["status"] == "completed"
        assert [i["type"] for i in body["output"]] == ["message"]
        assert body["output"][0]["content"][0]["text"] == loop_node.script["answer"]
    assert "x-runaway-action" not in second.headers
    # What vLLM received: one prompt, the size of the cleaned history's, well below the
    # looped history's (the loop text is rendered into the prompt; see tiny_model.py).
    assert after.prompt_tokens - before.prompt_tokens == prompt
    assert prompt == cleaned["usage"]["input_tokens"]
    assert prompt < looped["usage"]["input_tokens"] - loop_node.count_tokens(reasoning) // 2
    assert loop_node.sidecar_metric("runaway_sidecar_history_cleaned_total",
                                    route=api) == counted + 1
