"""The agent-loop check of a request as a whole (sidecar.core.agent_loops): the action
that applies, the note a nudge adds in each API's place, the refusal (pure)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from detectors.agent_loops import LoopCall, LoopConfig, LoopFinding
from sidecar.apis.messages.api import MESSAGES
from sidecar.apis.openai.api import CHAT, COMPLETIONS
from sidecar.apis.responses.api import RESPONSES
from sidecar.config import Config, ModelOverride
from sidecar.core import agent_loops, prepare
from sidecar.core.agent_loops import NOTE_MARK, Checked
from sidecar.core.plan import Refusal
from sidecar.core.wire import WireApi
from sidecar.dialects import DIALECTS
from sidecar.policy.rules import Policy, rules_of
from tests.detectors.test_agent_history import chat_body, messages_body, responses_body

Builder = Callable[..., dict[str, Any]]
APIS: list[tuple[WireApi, Builder]] = [
    (CHAT, chat_body), (MESSAGES, messages_body), (RESPONSES, responses_body)]
IDS = ["chat", "messages", "responses"]


def shaped(api: WireApi, body: dict[str, Any], cfg: Config) -> prepare.Shaped:
    got = prepare.read(api, orjson.dumps(body))
    assert isinstance(got, prepare.Read)
    out = prepare.shape(cfg, api, DIALECTS["vllm"], got, {}, Policy(rules_of((), ())),
                        lambda model: model or "")
    assert isinstance(out, prepare.Shaped)
    return out


def run(api: WireApi, body: dict[str, Any], mode: str = "nudge", *,
        cfg: Config | None = None, headers: dict[str, str] | None = None
        ) -> tuple[prepare.Shaped, Checked]:
    cfg = cfg or dataclasses.replace(Config(), agent_loops=mode)  # type: ignore[arg-type]
    before = shaped(api, body, cfg)
    return before, agent_loops.check(cfg, api, before, headers or {})


def notes(body: bytes) -> int:
    return body.count(NOTE_MARK.encode())


# -- which action ------------------------------------------------------------------------


def test_the_default_is_shadow() -> None:
    """Shipped default: shadow, with the calibrated thresholds."""
    cfg = Config()
    assert cfg.agent_loops == "shadow"
    assert cfg.agent_loop_detector == LoopConfig()
    assert (cfg.agent_loop_detector.repeat_min, cfg.agent_loop_detector.cycle_min,
            cfg.agent_loop_detector.text_min) == (6, 3, 4)


def test_header_then_model_then_global() -> None:
    """X-Agent-Loops wins over the model's entry, which wins over the global setting."""
    cfg = dataclasses.replace(Config(), agent_loops="shadow", models=(
        ModelOverride(match="coder", agent_loops="refuse"), ModelOverride(match="plain")))
    assert agent_loops.loop_mode(cfg, "my-coder", {}) == "refuse"
    assert agent_loops.loop_mode(cfg, "plain-7b", {}) == "shadow"  # entry leaves it unset
    assert agent_loops.loop_mode(cfg, "other", {}) == "shadow"
    assert agent_loops.loop_mode(cfg, "my-coder", {"X-Agent-Loops": "Nudge"}) == "nudge"
    assert agent_loops.loop_mode(cfg, "my-coder", {"X-Agent-Loops": "off"}) == "off"


def test_a_malformed_header_is_refused() -> None:
    """A bad X-Agent-Loops value is a 400 naming the header and the choices."""
    _, checked = run(CHAT, chat_body(8), headers={"X-Agent-Loops": "loud"})
    assert checked.refusal == Refusal(
        "X-Agent-Loops must be one of off, shadow, nudge, refuse", "X-Agent-Loops")


# -- shadow and off ----------------------------------------------------------------------


@pytest.mark.parametrize(("api", "build"), APIS, ids=IDS)
def test_shadow_finds_and_changes_nothing(api: WireApi, build: Builder) -> None:
    """shadow: the loop is found with its evidence; the request is the very same."""
    before, checked = run(api, build(8), "shadow")
    assert checked.shaped is before
    assert checked.refusal is None
    assert checked.found is not None
    assert checked.found.action == "shadow"
    finding = checked.found.finding
    assert (finding.kind, finding.count, finding.calls[0].name) == ("repeat", 8, "Grep")
    assert len(finding.indices) == 8


def with_new_last_result(api: WireApi, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` whose last tool result differs from the ones before (polling)."""
    if api is CHAT:
        body["messages"][-1]["content"] = "1 passed"
    elif api is MESSAGES:
        body["messages"][-1]["content"][0]["content"] = "1 passed"
    else:
        body["input"][-1]["output"] = "1 passed"
    return body


@pytest.mark.parametrize(("api", "build"), APIS, ids=IDS)
def test_off_below_threshold_and_polling_find_nothing(api: WireApi, build: Builder) -> None:
    """off does not look; 5 identical calls are below repeat_min 6; a call whose result
    changed is polling."""
    assert run(api, build(8), "off")[1].found is None
    assert run(api, build(5), "refuse")[1].found is None
    assert run(api, with_new_last_result(api, build(8)), "refuse")[1].found is None


def test_no_tool_calls_no_check() -> None:
    """A plain chat (no tool call in its history) is not looked at, even when the
    assistant said the same thing four times; nor is the completions API."""
    msgs: list[dict[str, Any]] = []
    for _ in range(5):
        msgs += [{"role": "user", "content": "Tell me again"},
                 {"role": "assistant", "content": "The capital of France is Paris."}]
    msgs.append({"role": "user", "content": "Again"})
    assert run(CHAT, {"model": "m", "messages": msgs}, "refuse")[1].found is None
    assert run(COMPLETIONS, {"model": "m", "prompt": "hi"}, "refuse")[1].found is None


# -- nudge -------------------------------------------------------------------------------


def test_the_note_in_each_apis_place() -> None:
    """chat: a user message after the tool messages; messages: a text block after the
    tool_result blocks of the last user message; responses: a user message item."""
    _, c = run(CHAT, chat_body(6))
    assert c.shaped.body["messages"][-2]["role"] == "tool"
    assert c.shaped.body["messages"][-1]["role"] == "user"
    assert c.shaped.body["messages"][-1]["content"].startswith(NOTE_MARK)

    _, m = run(MESSAGES, messages_body(6))
    last = m.shaped.body["messages"][-1]
    assert last["role"] == "user"
    assert [b["type"] for b in last["content"]] == ["tool_result", "text", "text"]
    assert last["content"][-1]["text"].startswith(NOTE_MARK)

    _, r = run(RESPONSES, responses_body(6))
    item = r.shaped.body["input"][-1]
    assert r.shaped.body["input"][-2]["type"] == "function_call_output"
    assert item["type"] == "message"
    assert item["role"] == "user"
    assert item["content"][0]["type"] == "input_text"
    assert item["content"][0]["text"].startswith(NOTE_MARK)


@pytest.mark.parametrize(("api", "build"), APIS, ids=IDS)
def test_nudge_once_per_episode_and_out_of_the_fingerprint(
        api: WireApi, build: Builder) -> None:
    """The note goes with the request that takes the run to repeat_min (6), in its raw
    bytes and body alike, with the prompt's fingerprint kept from before it; the 7th and
    later requests of the same run go as they came."""
    before, checked = run(api, build(6))
    assert checked.found is not None
    assert checked.found.action == "nudge"
    assert notes(checked.shaped.raw) == 1
    assert orjson.loads(checked.shaped.raw) == checked.shaped.body
    assert checked.shaped.facts == before.facts
    assert checked.shaped.facts.fingerprint == api.facts(before.body).fingerprint
    later_before, later = run(api, build(7))
    assert later.found is not None
    assert (later.found.action, later.found.reason) == ("passed", "nudged_before")
    assert later.shaped is later_before


def test_the_note_says_what_repeated() -> None:
    """The note names the call, the count and the unchanged result, and asks for a
    different approach."""
    _, checked = run(CHAT, chat_body(6))
    note = checked.shaped.body["messages"][-1]["content"]
    assert "`Grep`" in note
    assert "6 times" in note
    assert "result did not change" in note
    assert "different approach" in note
    cycle = LoopFinding("cycle", (LoopCall("Read", "{}"), LoopCall("Bash", "{}")), 3,
                        (1, 3, 5, 7, 9, 11))
    assert "(`Read`, `Bash`) 3 times" in agent_loops.note_text(cycle)
    assert "same reply 4 times" in agent_loops.note_text(
        LoopFinding("text", (), 4, (1, 3, 5, 7), "x"))


@pytest.mark.parametrize(("api", "build"), APIS, ids=IDS)
def test_a_note_already_in_the_body_is_not_stacked(api: WireApi, build: Builder) -> None:
    """A body that already carries the note (a second sidecar in the path) gets none."""
    _, first = run(api, build(6))
    again = agent_loops.check(dataclasses.replace(Config(), agent_loops="nudge"), api,
                              first.shaped, {})
    assert again.found is not None
    assert (again.found.action, again.found.reason) == ("passed", "note_in_body")
    assert notes(again.shaped.raw) == 1


def test_no_place_for_the_note() -> None:
    """A body whose history does not end on the user's side (an assistant prefill, a
    string input) has no place for the note."""
    body = chat_body(6)
    body["messages"].append({"role": "assistant", "content": "Let me"})
    body["messages"].insert(-1, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "Grep", "arguments": "{}"}}]})
    assert CHAT.with_loop_note(body, "n") is None
    assert MESSAGES.with_loop_note({"messages": [{"role": "assistant", "content": []}]},
                                   "n") is None
    assert RESPONSES.with_loop_note({"input": "a string"}, "n") is None


def test_first_reached_counts_the_newest_turn() -> None:
    """The threshold is first reached when the run without its newest turn's calls
    is below it; parallel calls of one turn share its index."""
    six = LoopFinding("repeat", (LoopCall("a", "{}"),), 6, (2, 4, 6, 8, 10, 12))
    seven = LoopFinding("repeat", (LoopCall("a", "{}"),), 7, (2, 4, 6, 8, 10, 12, 14))
    parallel = LoopFinding("repeat", (LoopCall("a", "{}"),), 7, (2, 4, 6, 8, 10, 12, 12))
    assert agent_loops.first_reached(six, 6, 1)
    assert not agent_loops.first_reached(seven, 6, 1)
    assert agent_loops.first_reached(parallel, 6, 1)
    cycle = LoopFinding("cycle", (LoopCall("a", "{}"), LoopCall("b", "{}")), 3,
                        (1, 3, 5, 7, 9, 11))
    assert agent_loops.first_reached(cycle, 3, 2)


# -- refuse ------------------------------------------------------------------------------


@pytest.mark.parametrize(("api", "build"), APIS, ids=IDS)
def test_refuse_while_the_history_ends_in_the_loop(api: WireApi, build: Builder) -> None:
    """refuse: a Refusal whose message names the call and the count, for the user."""
    _, checked = run(api, build(7), "refuse")
    assert checked.found is not None
    assert checked.found.action == "refuse"
    assert checked.refusal is not None
    assert checked.refusal.message.startswith("runaway-sidecar stopped an agent loop")
    assert "`Grep` 7 times" in checked.refusal.message
    assert checked.refusal.param == ("input" if api is RESPONSES else "messages")


def test_refuse_lets_the_user_speak() -> None:
    """Once the user has written after the loop's last call, the request goes on with
    the note (else the conversation could never go on)."""
    body = chat_body(9)
    body["messages"].append({"role": "user", "content": "Try reading the file instead."})
    _, checked = run(CHAT, body, "refuse")
    assert checked.refusal is None
    assert checked.found is not None
    assert (checked.found.action, checked.found.reason) == ("nudge", "user_after_loop")
    assert notes(checked.shaped.raw) == 1
