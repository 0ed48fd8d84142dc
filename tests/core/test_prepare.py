"""A watched request's bodies, step by step, as tables: bytes, headers, config and policy
in; what the upstream gets, or why it gets the request as it came, out (pure)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from detectors import DetectorConfig, Verdict
from detectors.base import Evidence
from sidecar.apis.messages.api import MESSAGES
from sidecar.apis.openai.api import CHAT
from sidecar.apis.responses.api import RESPONSES
from sidecar.config import Config, MemoryConfig, PolicyRule
from sidecar.core import prepare
from sidecar.core.attempt import AttemptSpec, text_mark
from sidecar.core.plan import Refusal
from sidecar.core.wire import CUT_NOTE, RequestFacts, WireApi
from sidecar.dialects import DIALECTS
from sidecar.policy.rules import Policy, rules_of

VLLM = DIALECTS["vllm"]
USER = {"role": "user", "content": "Fix the bug in my parser"}
CHAT_BODY: dict[str, Any] = {"model": "qwen3-8b", "messages": [USER], "stream": True}
LOOPED = "Wait, let me check again. " * 8
HISTORY: dict[str, Any] = {**CHAT_BODY, "messages": [
    USER, {"role": "assistant", "content": "Guard the index.", "reasoning": LOOPED}, USER]}
THINK_OFF = PolicyRule(name="no-think", thinking="off")


def raw(body: Any) -> bytes:
    return orjson.dumps(body)


def shape(body: dict[str, Any], *, headers: dict[str, str] | None = None,
          rules: tuple[PolicyRule, ...] = (), api: WireApi = CHAT,
          cfg: Config | None = None) -> prepare.Shaped | Refusal | prepare.Pass:
    got = prepare.read(api, raw(body))
    assert isinstance(got, prepare.Read)
    return prepare.shape(cfg or Config(), api, VLLM, got, headers or {},
                         Policy(rules_of(rules, ())), lambda model: model or "")


# -- step 1: read --------------------------------------------------------------------


@pytest.mark.parametrize(("api", "data"), [
    (CHAT, b"not json"),
    (CHAT, b"[1, 2]"),  # JSON, but no object
    (CHAT, raw({**CHAT_BODY, "n": 100_000})),  # more choices than the books keep
    (CHAT, b'{"model": "m", "messages": ' + b"[" * 300 + b"]" * 300 + b"}"),  # too deep
    (RESPONSES, raw({"model": "m", "input": "hi", "background": True})),
])
def test_what_cannot_be_watched_passes(api: WireApi, data: bytes) -> None:
    """A body the sidecar cannot watch goes upstream as its very bytes."""
    got = prepare.read(api, data)
    assert isinstance(got, prepare.Pass)
    assert got.raw is data


@pytest.mark.parametrize(("body", "recall"), [
    (CHAT_BODY, []),
    (HISTORY, [prepare.CUT_PREFIX + text_mark(LOOPED)]),
])
def test_read_names_the_history_to_recall(body: dict[str, Any], recall: list[str]) -> None:
    """A watchable body is parsed once, with the memory keys of the reasoning it carries
    back."""
    data = raw(body)
    got = prepare.read(CHAT, data)
    assert isinstance(got, prepare.Read)
    assert (got.body, got.raw, got.recall) == (body, data, recall)


# -- step 2: clean -------------------------------------------------------------------


def test_clean_without_cut_reasoning_is_the_same_request() -> None:
    """Nothing recalled as cut: the request and its bytes stay as they came."""
    got = prepare.read(CHAT, raw(HISTORY))
    assert isinstance(got, prepare.Read)
    assert prepare.clean(CHAT, got, set()) is got


def test_clean_replaces_cut_reasoning() -> None:
    """Reasoning the memory knows as cut is replaced by the note, and the bytes follow."""
    got = prepare.read(CHAT, raw(HISTORY))
    assert isinstance(got, prepare.Read)
    cleaned = prepare.clean(CHAT, got, set(got.recall))
    assert cleaned.body["messages"][1]["reasoning"] == CUT_NOTE
    assert cleaned.body["messages"][1]["content"] == "Guard the index."
    assert orjson.loads(cleaned.raw) == cleaned.body
    assert cleaned.recall == []


# -- step 3: shape -------------------------------------------------------------------


def test_shape_keeps_a_plain_request_as_it_came() -> None:
    """Nothing to change: the very bytes the client sent go upstream."""
    got = prepare.read(CHAT, raw({**CHAT_BODY, "max_tokens": 300}))
    assert isinstance(got, prepare.Read)
    shaped = prepare.shape(Config(), CHAT, VLLM, got, {}, Policy([]), lambda m: m or "")
    assert isinstance(shaped, prepare.Shaped)
    assert shaped.raw is got.raw
    assert (shaped.model, shaped.max_tokens, shaped.plan.mode) == ("qwen3-8b", 300, "enforce")
    assert shaped.facts == CHAT.facts(got.body)


@pytest.mark.parametrize(("body", "headers", "rules", "expected"), [
    # mode off: relayed as it came (with its history cleaned, if it was)
    (CHAT_BODY, {"X-Runaway-Mode": "off"}, (), "pass"),
    # a malformed control is refused, naming it
    (CHAT_BODY, {"X-Runaway-Mode": "loud"}, (), "refused X-Runaway-Mode"),
    (CHAT_BODY, {"X-Thinking-Budget": "lots"}, (), "refused thinking_token_budget"),
    # the policy turns thinking off: the model family's switch is merged in
    (CHAT_BODY, {}, (THINK_OFF,), {"chat_template_kwargs": {"enable_thinking": False}}),
    (CHAT_BODY, {"X-Thinking": "off"}, (), {"chat_template_kwargs": {"enable_thinking": False}}),
    # the client turned it off itself: its body stays as it is
    ({**CHAT_BODY, "reasoning_effort": "none"}, {}, (THINK_OFF,), {"reasoning_effort": "none"}),
    # reasoning the client hides is asked for anyway, to be watched
    ({**CHAT_BODY, "include_reasoning": False}, {}, (), {"include_reasoning": True}),
])
def test_shape(body: dict[str, Any], headers: dict[str, str], rules: tuple[PolicyRule, ...],
               expected: str | dict[str, Any]) -> None:
    """Planning and shaping: what the upstream gets, or why the request is not watched."""
    shaped = shape(body, headers=headers, rules=rules)
    if expected == "pass":
        assert isinstance(shaped, prepare.Pass)
        assert shaped.raw == raw(body)
    elif isinstance(expected, str):
        assert isinstance(shaped, Refusal)
        assert f"refused {shaped.param}" == expected
    else:
        assert isinstance(shaped, prepare.Shaped)
        assert shaped.body == {**body, **expected}
        assert orjson.loads(shaped.raw) == shaped.body


def test_hidden_reasoning_stays_hidden_for_the_client() -> None:
    """The facts are the client's: the exposed reasoning is removed from what it gets."""
    shaped = shape({**CHAT_BODY, "include_reasoning": False})
    assert isinstance(shaped, prepare.Shaped)
    assert shaped.facts.hide_reasoning


def test_thinking_off_by_policy_is_in_the_facts() -> None:
    """After the policy turned thinking off, the facts say so (no thinking-off reissue)."""
    shaped = shape(CHAT_BODY, rules=(THINK_OFF,))
    assert isinstance(shaped, prepare.Shaped)
    assert shaped.facts.thinking_disabled


def test_messages_thinking_off_uses_the_apis_switch() -> None:
    """Each API turns thinking off its own way (Anthropic's ``thinking`` field here)."""
    body = {"model": "qwen3-8b", "max_tokens": 100, "messages": [USER]}
    shaped = shape(body, rules=(THINK_OFF,), api=MESSAGES)
    assert isinstance(shaped, prepare.Shaped)
    assert shaped.body["thinking"] == {"type": "disabled"}
    assert shaped.facts.thinking_disabled


# -- step 4: ready -------------------------------------------------------------------


@pytest.mark.parametrize(("stream", "first"), [
    (True, None),  # the same bytes: the first attempt sends the request as shaped
    (False, {"stream": True, "stream_options": {"include_usage": True}}),
])
def test_ready_keeps_bytes_not_the_parsed_body(stream: bool, first: dict[str, Any] | None
                                                ) -> None:
    """A non-streaming request is sent upstream as a stream with usage, to be watched."""
    shaped = shape({**CHAT_BODY, "stream": stream})
    assert isinstance(shaped, prepare.Shaped)
    ready = prepare.ready(CHAT, shaped, shaped.plan)
    assert ready.raw is shaped.raw
    if first is None:
        assert ready.first is shaped.raw
    else:
        assert orjson.loads(ready.first) == {**shaped.body, **first}
    assert not any(isinstance(getattr(ready, f), dict) for f in ready.__slots__)


# -- the attempts' bodies ------------------------------------------------------------


@pytest.mark.parametrize(("memory", "mode", "disabled", "expected"), [
    (True, "enforce", False, True),
    (False, "enforce", False, False),  # memory.enabled = false
    (True, "cut", False, False),  # only enforce reissues
    (True, "shadow", False, False),
    (True, "enforce", True, False),  # the client turned thinking off itself
])
def test_recalls_memory(memory: bool, mode: Any, disabled: bool, expected: bool) -> None:
    """Only an enforced request that thinks asks the runaway memory about its prompt."""
    cfg = Config(memory=MemoryConfig(enabled=memory))
    facts = RequestFacts(fingerprint="f", client_stream=True, thinking_disabled=disabled)
    assert prepare.recalls_memory(cfg, mode, facts) is expected


def test_memory_body_turns_thinking_off_for_every_choice() -> None:
    """A prompt that ran away recently starts with the no-think step's body."""
    body = {**CHAT_BODY, "n": 2}
    body_bytes = raw(body)
    facts = CHAT.facts(body)
    sent = orjson.loads(prepare.memory_body(CHAT, body_bytes, facts, Config().reissue.rules))
    assert sent["chat_template_kwargs"] == {"enable_thinking": False}
    assert sent["n"] == 2
    assert sent["messages"] == body["messages"]


def test_reissue_body_salvages_the_reasoning_before_the_loop() -> None:
    """A salvage step continues from the reasoning before the repeating unit began."""
    body = {**CHAT_BODY, "stream": True}
    facts = CHAT.facts(body)
    opened = CHAT.open(facts, VLLM, request_id="r", model="qwen3-8b")
    attempt = opened.attempt(AttemptSpec(number=0, detectors=DetectorConfig(), started_at=0.0,
                                         exchange_started=0.0, keep_reasoning=True))
    for text in ("First, read the parser. ", "Loop! ", "Loop! ", "Loop! "):
        chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                 "choices": [{"index": 0, "delta": {"reasoning": text}}]}
        attempt.feed(b"data: " + raw(chunk) + b"\n\n", 0.0)
    verdict = Verdict(detector="periodic", channel="thinking", reason="loop",
                      evidence=Evidence(excerpt="Loop! ", period=6, count=3), at_token=4,
                      at_char=42)
    sent = orjson.loads(prepare.reissue_body(
        CHAT, raw(body), "salvage", facts, rules=Config().reissue.rules, open_choices=1,
        attempt=attempt, verdict=verdict))
    assert sent["messages"][-1] == {
        "role": "assistant", "content": "<think>\nFirst, read the parser.\n</think>\n\n"}
    assert sent["continue_final_message"] is True
