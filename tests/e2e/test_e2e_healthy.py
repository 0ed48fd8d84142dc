"""Real vLLM, healthy model: when nothing fires, the sidecar changes nothing."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.vllm


def test_models_list_passes_through(healthy_node) -> None:
    """GET /v1/models through the sidecar is vLLM's own answer (minus per-call ids/times)."""

    def stable(via: str) -> list[tuple[str, str, str | None, int | None]]:
        page = healthy_node.client(via).models.list()
        return [
            (
                m.id,
                m.owned_by,
                (m.model_extra or {}).get("root"),
                (m.model_extra or {}).get("max_model_len"),
            )
            for m in page.data
        ]

    direct = stable("vllm")
    assert direct == stable("sidecar")
    assert [m[0] for m in direct] == [healthy_node.model]
    assert direct[0][3] == 8192


@pytest.mark.parametrize("mode", [None, "enforce", "cut", "shadow", "off"])
def test_stream_identical_to_direct(healthy_node, mode) -> None:
    """A healthy stream through the sidecar has vLLM's chunks, text, finish and usage."""
    messages = healthy_node.messages("healthy-stream")
    body = {"messages": messages, "max_tokens": 1024, "stream_options": {"include_usage": True}}
    direct = healthy_node.stream("vllm", **body)
    headers = {"X-Runaway-Mode": mode} if mode else None
    proxied = healthy_node.stream("sidecar", headers=headers, **body)

    script = healthy_node.script
    assert direct.reasoning[0] == script["healthy_thought"]
    assert direct.content[0].strip() == script["answer"]
    assert direct.finish == {0: "stop"}
    # Chunk boundaries are not compared: vLLM coalesces tokens into one chunk whenever its
    # output is produced faster than it is sent, so two direct runs differ there too.
    assert proxied.reasoning == direct.reasoning
    assert proxied.content == direct.content
    assert proxied.finish == direct.finish
    assert proxied.usage == direct.usage
    assert proxied.usage is not None
    assert proxied.done
    assert proxied.events_after_done == 0
    assert proxied.comments == []
    assert len(proxied.identity()) == 1
    assert proxied.headers.get("content-type", "").startswith("text/event-stream")


@pytest.mark.parametrize("mode", [None, "shadow", "off"])
def test_nonstream_identical_to_direct(healthy_node, mode) -> None:
    """A healthy non-streaming answer through the sidecar equals vLLM's, usage included."""
    messages = healthy_node.messages("healthy-nonstream")
    direct, _ = healthy_node.complete("vllm", messages=messages, max_tokens=1024)
    headers = {"X-Runaway-Mode": mode} if mode else None
    proxied, proxied_headers = healthy_node.complete(
        "sidecar", headers=headers, messages=messages, max_tokens=1024
    )

    d, p = direct.choices[0], proxied.choices[0]
    assert p.message.content == d.message.content
    assert p.message.content is not None
    assert p.message.content.strip() == healthy_node.script["answer"]
    assert healthy_node.reasoning_of(p.message) == healthy_node.reasoning_of(d.message)
    assert healthy_node.reasoning_of(d.message) == healthy_node.script["healthy_thought"]
    assert p.finish_reason == d.finish_reason == "stop"
    assert healthy_node.usage_dict(proxied.usage) == healthy_node.usage_dict(direct.usage)
    assert proxied.model == direct.model
    assert not any(h.startswith("x-runaway-") for h in proxied_headers)


def test_n2_stream_identical_to_direct(healthy_node) -> None:
    """n=2 passes through watched: both choices as vLLM sent them."""
    body = {
        "messages": healthy_node.messages("healthy-n2"),
        "max_tokens": 1024,
        "n": 2,
        "stream_options": {"include_usage": True},
    }
    direct = healthy_node.stream("vllm", **body)
    proxied = healthy_node.stream("sidecar", **body)
    assert proxied.reasoning == direct.reasoning
    assert proxied.content == direct.content
    assert set(proxied.content) == {0, 1}
    assert proxied.finish == {0: "stop", 1: "stop"}
    assert proxied.usage == direct.usage
    assert proxied.comments == []


def test_thinking_off_identical_to_direct(healthy_node) -> None:
    """A client's own enable_thinking=false request is relayed unchanged."""
    body = {
        "messages": healthy_node.messages("healthy-off"),
        "max_tokens": 64,
        "extra_body": {"chat_template_kwargs": {"enable_thinking": False}},
        "stream_options": {"include_usage": True},
    }
    direct = healthy_node.stream("vllm", **body)
    proxied = healthy_node.stream("sidecar", **body)
    assert proxied.content == direct.content
    assert proxied.content[0] == healthy_node.script["answer"]
    assert proxied.finish == direct.finish
    assert proxied.usage == direct.usage
