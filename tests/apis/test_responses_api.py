"""OpenAI Responses as a wire API (``sidecar.apis.responses.api``): reading a request, the
bodies sent upstream, the history and the error shape."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from sidecar.apis.responses.api import RESPONSES
from sidecar.config import Config
from sidecar.core.wire import CUT_NOTE
from sidecar.dialects import DIALECTS

BODY: dict[str, Any] = {
    "model": "qwen3-8b", "max_output_tokens": 700, "stream": True,
    "instructions": "You are a coder.",
    "input": [{"role": "developer", "content": "Be brief."},
              {"role": "user", "content": [{"type": "input_text", "text": "fix it"}]},
              {"type": "function_call_output", "call_id": "c1", "output": "ok"}],
    "tools": [{"type": "function", "name": "read"}],
    "reasoning": {"effort": "high", "summary": "auto"},
}


def test_the_view_reads_instructions_developer_and_last_user_items() -> None:
    """A developer or system item overrides ``instructions``; the last user item's text
    parts are what the user asked; ``max_output_tokens`` is the limit."""
    view = RESPONSES.view(BODY, {})
    assert (view.model, view.route, view.system, view.last_user) == (
        "qwen3-8b", "responses", "Be brief.", "fix it")
    assert view.tools
    assert view.max_tokens == 700
    assert RESPONSES.view({"input": "hello", "instructions": "sys"}, {}).last_user == "hello"
    assert RESPONSES.max_tokens({"max_tokens": 5}) is None


@pytest.mark.parametrize(("body", "asked"), [
    ({"reasoning": {"effort": "none"}}, "off"),
    ({"reasoning": {"effort": "low"}}, "on"),
    ({"chat_template_kwargs": {"enable_thinking": False}}, "off"),
    ({"reasoning": {"effort": "medium"}, "chat_template_kwargs": {"enable_thinking": False}},
     "on"),
    ({"reasoning": {"summary": "auto"}}, None),
])
def test_what_the_client_asked_of_thinking(body: dict[str, Any], asked: str | None) -> None:
    """``reasoning.effort`` decides (``none`` is off); else ``chat_template_kwargs``."""
    assert RESPONSES.client_thinking(body) == asked


def test_the_facts_keep_what_the_client_must_see_echoed() -> None:
    """The client's own ``reasoning`` is echoed in the response objects; hidden reasoning
    and a background request (passed through unwatched) are noticed."""
    facts = RESPONSES.facts({**BODY, "include_reasoning": False})
    assert facts.client_stream
    assert facts.hide_reasoning
    assert facts.echo == {"reasoning": BODY["reasoning"]}
    assert RESPONSES.facts({"reasoning": {"effort": "none"}}).thinking_disabled
    assert RESPONSES.watchable(BODY)
    assert not RESPONSES.watchable({**BODY, "background": True})


def test_the_fingerprint_is_what_the_model_is_asked() -> None:
    """Two requests that differ only in how they are streamed are the same prompt; a
    different input is another."""
    same = RESPONSES.facts({**BODY, "stream": False, "max_output_tokens": 5})
    assert same.fingerprint == RESPONSES.facts(BODY).fingerprint
    other = RESPONSES.facts({**BODY, "input": "something else"})
    assert other.fingerprint != RESPONSES.facts(BODY).fingerprint


def test_a_reissue_turns_thinking_off_and_keeps_the_rest() -> None:
    """``reasoning.effort: none`` (``low`` for gpt-oss) and the family's template switch,
    a stream, on the fallback model for ``fallback:MODEL``; the rest kept."""
    body = {**BODY, "stream": False}
    rules = RESPONSES.off_rules(Config(), DIALECTS["vllm"])
    out = RESPONSES.reissue_body(body, "no-think", RESPONSES.facts(body), rules=rules,
                                 open_choices=1)
    assert out["reasoning"] == {"effort": "none", "summary": "auto"}
    assert out["chat_template_kwargs"] == {"enable_thinking": False}
    assert out["stream"] is True
    assert (out["input"], out["tools"], out["instructions"]) == (
        BODY["input"], BODY["tools"], BODY["instructions"])
    fallback = RESPONSES.reissue_body(body, "fallback:openai/gpt-oss-20b",
                                      RESPONSES.facts(body), rules=rules, open_choices=1)
    assert fallback["model"] == "openai/gpt-oss-20b"
    assert fallback["reasoning"]["effort"] == "low"
    assert body["reasoning"] == {"effort": "high", "summary": "auto"}  # input left alone
    assert RESPONSES.first_body(body, RESPONSES.facts(body)) == {**BODY, "stream": True}
    assert RESPONSES.first_body(BODY, RESPONSES.facts(BODY)) is None


def test_only_the_reasoning_items_the_sidecar_cut_are_replaced() -> None:
    """Every reasoning item's id is a mark to recall; a cut one comes back with the note
    as its only text and no summary, the others untouched."""
    items = [{"type": "reasoning", "id": "rs_cut", "summary": [{"text": "s"}],
              "content": [{"type": "reasoning_text", "text": "loop loop"}]},
             {"type": "reasoning", "id": "rs_ok", "summary": [],
              "content": [{"type": "reasoning_text", "text": "fine"}]},
             {"role": "user", "content": "next"}]
    body = {**BODY, "input": items}
    assert RESPONSES.history_marks(body) == ["rs_cut", "rs_ok"]
    cleaned = RESPONSES.clean_history(body, {"rs_cut"})
    assert cleaned["input"][0] == {"type": "reasoning", "id": "rs_cut", "summary": [],
                                   "content": [{"type": "reasoning_text", "text": CUT_NOTE}]}
    assert cleaned["input"][1:] == items[1:]
    assert items[0]["content"] == [{"type": "reasoning_text", "text": "loop loop"}]


def test_errors_have_openais_shape() -> None:
    """``{"error": {"message", "type", "param", "code"}}``, as vLLM's own errors."""
    error = orjson.loads(RESPONSES.error_body(400, "bad", "BadRequestError", "input"))
    assert error == {"error": {"message": "bad", "type": "BadRequestError", "param": "input",
                               "code": 400}}
