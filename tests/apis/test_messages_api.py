"""Anthropic Messages as a wire API (``sidecar.apis.messages.api``): reading a request, the
bodies sent upstream, the history and the error shape."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from sidecar.apis.messages.api import MESSAGES
from sidecar.apis.messages.splice import MARK_PREFIX
from sidecar.config import Config
from sidecar.core.wire import CUT_NOTE
from sidecar.dialects import DIALECTS

BODY: dict[str, Any] = {
    "model": "qwen3-8b", "max_tokens": 512, "stream": True,
    "system": [{"type": "text", "text": "You are a coder."},
               {"type": "text", "text": "Be brief."}],
    "messages": [{"role": "user", "content": "first"},
                 {"role": "assistant", "content": "ok"},
                 {"role": "user", "content": [{"type": "text", "text": "fix it"},
                                              {"type": "image", "source": {}}]}],
    "tools": [{"name": "read", "input_schema": {}}],
}


def test_the_view_reads_the_top_level_system_and_the_last_user_text() -> None:
    """The policy sees the system blocks joined, the last user message's text blocks, the
    tools and ``max_tokens``."""
    view = MESSAGES.view(BODY, {})
    assert (view.model, view.route, view.system, view.last_user) == (
        "qwen3-8b", "messages", "You are a coder.\nBe brief.", "fix it")
    assert view.tools
    assert view.max_tokens == 512


@pytest.mark.parametrize(("body", "asked"), [
    ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "on"),
    ({"thinking": {"type": "disabled"}}, "off"),
    ({"thinking": {"type": "adaptive"}}, None),
    ({"chat_template_kwargs": {"enable_thinking": False}}, "off"),
    ({"chat_template_kwargs": {"thinking": True}}, "on"),
    ({"thinking": {"type": "enabled"}, "chat_template_kwargs": {"enable_thinking": False}},
     "on"),
    ({}, None),
])
def test_what_the_client_asked_of_thinking(body: dict[str, Any], asked: str | None) -> None:
    """``thinking.type`` enabled or disabled decides; else ``chat_template_kwargs``."""
    assert MESSAGES.client_thinking(body) == asked


def test_the_facts_and_the_thinking_budget() -> None:
    """A streaming client, thinking switched off by either switch, and ``budget_tokens``
    only while thinking is enabled; the API hides no reasoning and has no salvage."""
    facts = MESSAGES.facts(BODY)
    assert facts.client_stream
    assert not facts.thinking_disabled
    assert not facts.salvageable
    assert MESSAGES.facts({"stream": False}).client_stream is False
    assert MESSAGES.facts({"thinking": {"type": "disabled"}}).thinking_disabled
    assert MESSAGES.facts({"chat_template_kwargs": {"enable_thinking": False}}).thinking_disabled
    enabled = {"thinking": {"type": "enabled", "budget_tokens": 2048}}
    assert MESSAGES.thinking_budget(enabled) == 2048
    assert MESSAGES.thinking_budget({"thinking": {"type": "disabled",
                                                  "budget_tokens": 2048}}) is None
    assert MESSAGES.expose_reasoning({"include_reasoning": False}) is None


def test_a_non_streaming_request_is_watched_as_a_stream() -> None:
    """A streaming client's body goes as it is; a non-streaming one's asks for a stream."""
    assert MESSAGES.first_body(BODY, MESSAGES.facts(BODY)) is None
    body = {**BODY, "stream": False}
    assert MESSAGES.first_body(body, MESSAGES.facts(body)) == {**BODY, "stream": True}


def test_a_reissue_turns_thinking_off_and_keeps_the_rest() -> None:
    """``thinking`` disabled (its budget dropped) and the family's template switch, a
    stream, on the fallback model for ``fallback:MODEL``; tools and system kept."""
    body = {**BODY, "stream": False, "thinking": {"type": "enabled", "budget_tokens": 99}}
    rules = MESSAGES.off_rules(Config(), DIALECTS["vllm"])
    out = MESSAGES.reissue_body(body, "no-think", MESSAGES.facts(body), rules=rules,
                                open_choices=1)
    assert out["thinking"] == {"type": "disabled"}
    assert out["chat_template_kwargs"] == {"enable_thinking": False}
    assert out["stream"] is True
    assert (out["model"], out["tools"], out["system"]) == (BODY["model"], BODY["tools"],
                                                          BODY["system"])
    fallback = MESSAGES.reissue_body(body, "fallback:small", MESSAGES.facts(body),
                                     rules=rules, open_choices=1)
    assert fallback["model"] == "small"
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 99}  # input left alone


def test_llama_cpp_gets_the_template_switch_for_any_model() -> None:
    """llama.cpp ignores ``thinking.disabled``: its dialect's rule switches the template
    off for a model no family rule names."""
    rules = MESSAGES.off_rules(Config(), DIALECTS["llamacpp"])
    out = MESSAGES.thinking_off({"model": "mystery-model"}, rules)
    assert out["chat_template_kwargs"] == {"enable_thinking": False}
    assert MESSAGES.thinking_off({"model": "mystery-model"},
                                 MESSAGES.off_rules(Config(), DIALECTS["vllm"])) == {
        "model": "mystery-model", "thinking": {"type": "disabled"}}


def test_only_the_thinking_blocks_the_sidecar_cut_are_replaced() -> None:
    """The history's thinking blocks with a sidecar signature are its marks; a cut one
    comes back with the note in place of its text, the others untouched."""
    cut_sig = MARK_PREFIX + "0" * 24
    history = {**BODY, "messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "loop loop", "signature": cut_sig},
            {"type": "text", "text": "a"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "fine", "signature": "abc"}]},
    ]}
    assert MESSAGES.history_marks(history) == [cut_sig]
    cleaned = MESSAGES.clean_history(history, {cut_sig})
    assert cleaned["messages"][1]["content"] == [
        {"type": "thinking", "thinking": CUT_NOTE, "signature": cut_sig},
        {"type": "text", "text": "a"}]
    assert cleaned["messages"][2] == history["messages"][2]
    assert history["messages"][1]["content"][0]["thinking"] == "loop loop"


@pytest.mark.parametrize(("status", "kind"), [
    (400, "invalid_request_error"), (404, "not_found_error"), (429, "rate_limit_error"),
    (502, "api_error"), (529, "overloaded_error")])
def test_errors_have_anthropics_shape(status: int, kind: str) -> None:
    """``{"type": "error", "error": {"type", "message"}}``, the type from the status."""
    assert orjson.loads(MESSAGES.error_body(status, "nope", "ignored")) == {
        "type": "error", "error": {"type": kind, "message": "nope"}}
