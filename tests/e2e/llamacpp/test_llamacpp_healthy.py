"""Real llama.cpp, healthy model: when nothing fires, the sidecar changes nothing.

"Nothing" is checked on the bytes: the events of a stream, and the body of a non-streaming
answer, are the server's own once the values llama.cpp draws afresh for every response are
blanked: ``id``, ``created`` and the ``timings`` durations. The prompt cache is warmed with
the same messages first, so ``prompt_tokens_details.cached_tokens`` is the same for the
direct and the proxied request.
"""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.llamacpp

USAGE = {"stream_options": {"include_usage": True}}
_FRESH = (
    (re.compile(r'"id":"chatcmpl-[A-Za-z0-9]+"'), '"id":"~"'),
    (re.compile(r'"created":\d+'), '"created":0'),
    (re.compile(r'"timings":\{[^{}]*\}'), '"timings":{}'),
)


def fresh_blanked(text: str) -> str:
    """``text`` with the per-response id, timestamp and timings blanked."""
    for pattern, replacement in _FRESH:
        text = pattern.sub(replacement, text)
    return text


def test_models_list_passes_through(healthy_node) -> None:
    """GET /v1/models through the sidecar is llama-server's own answer (``created`` is
    the time of the call)."""
    direct = healthy_node.client("llamacpp").models.with_raw_response.list()
    proxied = healthy_node.client("sidecar").models.with_raw_response.list()
    assert fresh_blanked(proxied.text) == fresh_blanked(direct.text)
    assert [m.id for m in direct.parse().data] == [healthy_node.model]


@pytest.mark.parametrize("mode", [None, "enforce", "cut", "shadow", "off"])
def test_stream_identical_to_direct(healthy_node, mode) -> None:
    """A healthy stream through the sidecar is llama.cpp's event for event, byte for byte
    (ids, timestamps and timings aside): reasoning, </think>, answer, usage, [DONE]."""
    body = {"messages": healthy_node.messages("healthy-stream"), "max_tokens": 1024, **USAGE}
    healthy_node.stream("llamacpp", **body)  # warms the prompt cache for both below
    direct = healthy_node.stream("llamacpp", **body)
    headers = {"X-Runaway-Mode": mode} if mode else None
    proxied = healthy_node.stream("sidecar", headers=headers, **body)

    script = healthy_node.script
    assert direct.reasoning[0] == script["healthy_thought"]
    assert direct.content[0].strip() == script["answer"]
    assert direct.finish == {0: "stop"}
    assert direct.usage is not None
    assert [fresh_blanked(e) for e in proxied.events] == [fresh_blanked(e) for e in direct.events]
    assert len(proxied.events) > 300  # one event per token: this is the whole stream
    assert proxied.done
    assert proxied.events_after_done == 0
    assert proxied.comments == []
    assert len(proxied.identity()) == 1
    assert proxied.headers.get("content-type", "").startswith("text/event-stream")


@pytest.mark.parametrize("mode", [None, "shadow", "off"])
def test_nonstream_identical_to_direct(healthy_node, mode) -> None:
    """A healthy non-streaming answer through the sidecar is llama.cpp's body, byte for
    byte (ids, timestamps and timings aside), with no X-Runaway-* header."""
    body = {"messages": healthy_node.messages("healthy-nonstream"), "max_tokens": 1024}
    healthy_node.complete("llamacpp", **body)  # warms the prompt cache for both below
    direct, _, direct_raw = healthy_node.complete("llamacpp", **body)
    headers = {"X-Runaway-Mode": mode} if mode else None
    proxied, proxied_headers, proxied_raw = healthy_node.complete(
        "sidecar", headers=headers, **body)

    message = direct.choices[0].message
    assert (message.model_extra or {}).get("reasoning_content") == healthy_node.script[
        "healthy_thought"]
    assert (message.content or "").strip() == healthy_node.script["answer"]
    assert fresh_blanked(proxied_raw.decode()) == fresh_blanked(direct_raw.decode())
    assert proxied.choices[0].finish_reason == "stop"
    assert not any(h.startswith("x-runaway-") for h in proxied_headers)
