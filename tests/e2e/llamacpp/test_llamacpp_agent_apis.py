"""Real llama.cpp, the coding-agent APIs: Anthropic ``/v1/messages`` and OpenAI
``/v1/responses`` through the sidecar (``dialect = "llamacpp"``), with the official SDKs.

llama.cpp serves both. Its Messages API ignores ``thinking: {"type": "disabled"}`` (the
same loop comes back); the sidecar's reissue there carries
``chat_template_kwargs.enable_thinking = false``, which works. Its Responses events carry
no ``sequence_number`` and its ``reasoning.effort: "none"`` turns thinking off.
"""

from __future__ import annotations

import json

import anthropic
import httpx
import pytest

pytestmark = pytest.mark.llamacpp

MAX_TOKENS = 4000
CUT_BOUND = MAX_TOKENS // 2


def _events(text: str) -> list[tuple[str, dict[str, object]]]:
    out = []
    for block in text.split("\n\n"):
        name = data = None
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
        if name is not None and data is not None:
            out.append((name, data))
    return out


def _post(url: str, body: dict[str, object]) -> httpx.Response:
    with httpx.Client(timeout=120.0) as client:
        return client.post(url, json=body)


def test_messages_loop_is_cut_and_answered(loop_node, e2e_report) -> None:
    """A thinking loop on /v1/messages is cut, llama.cpp's slot is freed, and the reissue
    with the template switch answers in the same message: one message_start, the cut
    thinking block closed, the answer in the next block, one message_stop."""
    loop_node.wait_idle()
    before = loop_node.predicted()
    resp = _post(loop_node.url("sidecar") + "/v1/messages", {
        "model": loop_node.model, "max_tokens": MAX_TOKENS, "stream": True,
        "messages": loop_node.messages("messages-cut")})
    assert resp.status_code == 200
    events = _events(resp.text)
    names = [n for n, _ in events]
    assert names.count("message_start") == 1
    assert names[-1] == "message_stop"
    assert names.count("message_stop") == 1
    starts = [(e["index"], e["content_block"]["type"]) for n, e in events  # type: ignore[index]
              if n == "content_block_start"]
    assert starts == [(0, "thinking"), (1, "text")]
    text = "".join(e["delta"].get("text", "") for n, e in events  # type: ignore[union-attr]
                   if n == "content_block_delta")
    assert loop_node.script["answer"] in text
    assert ": runaway detector=" in resp.text
    idle = loop_node.wait_idle()
    generated = loop_node.predicted() - before
    assert generated < CUT_BOUND
    e2e_report("llamacpp_messages_loop", generated=generated, idle_after_seconds=idle)


def test_messages_sdk_non_streaming(loop_node) -> None:
    """``messages.create`` without streaming gets one message with the cut thinking and
    the answer, and the X-Runaway headers."""
    # Closed when done: a client left to the garbage collector leaves its pooled
    # connection open, and the ResourceWarning fails whichever test the collection hits.
    with anthropic.Anthropic(base_url=loop_node.url("sidecar"), api_key="e2e",
                             max_retries=0, timeout=120.0) as client:
        raw = client.messages.with_raw_response.create(
            model=loop_node.model, max_tokens=MAX_TOKENS,
            messages=loop_node.messages("messages-body"))  # type: ignore[arg-type]
    message = raw.parse()
    assert raw.headers["x-runaway-attempts"] == "2"
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert loop_node.script["answer"] in message.content[1].text  # type: ignore[union-attr]
    loop_node.wait_idle()


def test_responses_loop_is_cut_and_answered(loop_node, e2e_report) -> None:
    """A reasoning loop on /v1/responses is cut and answered in one response, with no
    sequence numbers added (llama.cpp numbers none), the cut item closed, one
    response.completed; the slot is freed."""
    loop_node.wait_idle()
    before = loop_node.predicted()
    resp = _post(loop_node.url("sidecar") + "/v1/responses", {
        "model": loop_node.model, "max_output_tokens": MAX_TOKENS, "stream": True,
        "input": loop_node.messages("responses-cut")[0]["content"]})
    assert resp.status_code == 200
    events = _events(resp.text)
    assert all("sequence_number" not in e for _, e in events)
    names = [n for n, _ in events]
    assert names.count("response.completed") == 1
    assert names[-1] == "response.completed"
    final = events[-1][1]["response"]
    assert final["status"] == "completed"  # type: ignore[index]
    types = [item["type"] for item in final["output"]]  # type: ignore[index]
    assert types[0] == "reasoning"
    assert types[-1] == "message"
    added = sum(1 for n in names if n == "response.output_item.added")
    assert added == sum(1 for n in names if n == "response.output_item.done")
    answer = final["output"][-1]["content"][0]["text"]  # type: ignore[index]
    assert loop_node.script["answer"] in answer
    idle = loop_node.wait_idle()
    generated = loop_node.predicted() - before
    assert generated < CUT_BOUND
    e2e_report("llamacpp_responses_loop", generated=generated, idle_after_seconds=idle)


def test_responses_non_streaming(loop_node) -> None:
    """``responses.create`` without streaming gets the answer and the X-Runaway headers."""
    client = loop_node.client()
    raw = client.responses.with_raw_response.create(
        model=loop_node.model, max_output_tokens=MAX_TOKENS,
        input=loop_node.messages("responses-body")[0]["content"])
    assert raw.headers["x-runaway-attempts"] == "2"
    assert loop_node.script["answer"] in raw.parse().output_text
    loop_node.wait_idle()
