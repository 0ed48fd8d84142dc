"""Real vLLM, healthy model, the coding-agent APIs: when nothing fires, what the client gets
from ``/v1/messages`` and ``/v1/responses`` through the sidecar is vLLM's answer byte for
byte, except what vLLM draws afresh for every request (ids, ``created_at``, thinking-block
signatures)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.vllm

APIS = ("messages", "responses")
#: Pairs of requests (direct, through the sidecar) tried before a stream comparison fails
#: for vLLM's coalescing (see ``_one_token_each``).
TRIES = 5


def _one_token_each(node, api: str, raw: bytes) -> bool:
    """Whether every reasoning and answer delta of a stream carries one token. vLLM puts
    several tokens into one delta when its API server falls behind the engine, so two
    direct streams of the same answer can differ in their framing; only streams of one
    token per delta are compared byte for byte."""
    texts = node.wire.delta_texts(api, node.wire.parse(api, raw))
    return bool(texts) and all(node.count_tokens(t) == 1 for t in texts)


def _check_answer(node, api: str, raw: bytes) -> None:
    script = node.script
    if api == "messages":
        got = node.wire.MessagesStream.of(raw)
        assert got.problems == []
        assert [b.kind for b in got.blocks] == ["thinking", "text"]
        assert got.text("thinking") == script["healthy_thought"]
        assert got.text("text").strip() == script["answer"]
    else:
        got = node.wire.ResponsesStream.of(raw)
        assert got.problems == []
        assert [b.kind for b in got.items] == ["reasoning", "message"]
        assert got.text("reasoning") == script["healthy_thought"]
        assert got.text("message").strip() == script["answer"]


def _turn(node, api: str, tag: str) -> dict:
    return node.agent_turn(api, tag, 1024)


@pytest.mark.parametrize("mode", [None, "shadow"])
@pytest.mark.parametrize("api", APIS)
def test_stream_identical_to_direct(healthy_node, api, mode, e2e_report) -> None:
    """A healthy stream through the sidecar is vLLM's own, byte for byte, ids, created_at
    and signatures aside."""
    headers = {"X-Runaway-Mode": mode} if mode else None
    for attempt in range(1, TRIES + 1):
        body = {**_turn(healthy_node, api, f"{api}-identical-{attempt}"), "stream": True}
        direct = healthy_node.agent_raw(api, "vllm", **body)
        proxied = healthy_node.agent_raw(api, headers=headers, **body)
        if _one_token_each(healthy_node, api, direct.body) and _one_token_each(
                healthy_node, api, proxied.body):
            break
        e2e_report(f"{api}_stream_coalesced", try_number=attempt)
    else:
        pytest.fail(f"vLLM coalesced tokens in every one of {TRIES} pairs of streams")
    _check_answer(healthy_node, api, direct.body)
    assert proxied.status == direct.status == 200
    assert proxied.headers["content-type"] == direct.headers["content-type"]
    assert healthy_node.wire.normalized(proxied.body) == healthy_node.wire.normalized(
        direct.body)
    assert not any(h.startswith("x-runaway-") for h in proxied.headers)
    e2e_report(f"{api}_stream_identical", tries=attempt, bytes=len(proxied.body))


@pytest.mark.parametrize("api", APIS)
def test_nonstream_identical_to_direct(healthy_node, api) -> None:
    """A healthy non-streaming answer through the sidecar (which watches it as a stream and
    folds it) is vLLM's own body, byte for byte, ids, created_at and signatures aside."""
    body = _turn(healthy_node, api, f"{api}-identical-nonstream")
    direct = healthy_node.agent_raw(api, "vllm", **body)
    proxied = healthy_node.agent_raw(api, **body)
    assert proxied.status == direct.status == 200
    answer = direct.json()
    if api == "messages":
        assert [b["type"] for b in answer["content"]] == ["thinking", "text"]
        assert answer["content"][0]["thinking"] == healthy_node.script["healthy_thought"]
    else:
        assert [i["type"] for i in answer["output"]] == ["reasoning", "message"]
        text = answer["output"][0]["content"][0]["text"]
        assert text == healthy_node.script["healthy_thought"]
    assert proxied.headers["content-type"] == direct.headers["content-type"]
    assert healthy_node.wire.normalized(proxied.body) == healthy_node.wire.normalized(
        direct.body)
    assert not any(h.startswith("x-runaway-") for h in proxied.headers)
