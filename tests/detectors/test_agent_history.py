"""The per-API history readers of detectors.agent_history (issue 39)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from detectors.agent_history import (
    canonical_arguments,
    chat_history,
    messages_history,
    ollama_history,
    responses_history,
)
from detectors.agent_loops import LoopConfig, Reply, Step, UserTurn, check

ARGS = {"pattern": "parse_rows", "path": "."}
RESULT = "parse_rows.py:1:def parse_rows(rows):"


def messages_body(n: int, result: str = RESULT) -> dict[str, Any]:
    """A Claude Code-shaped /v1/messages body: n Grep calls, each answered."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": [
        {"type": "text", "text": "Fix the IndexError in parse_rows()."}]}]
    for i in range(n):
        msgs.append({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Let me search.", "signature": "s"},
            {"type": "tool_use", "id": f"toolu_{i}", "name": "Grep", "input": dict(ARGS)}]})
        msgs.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": result},
            {"type": "text", "text": "<system-reminder>keep going</system-reminder>"}]})
    return {"model": "m", "max_tokens": 100, "messages": msgs}


def responses_body(n: int, result: str = RESULT) -> dict[str, Any]:
    """A Codex-shaped /v1/responses body: function_call / function_call_output items."""
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "developer", "content": [
            {"type": "input_text", "text": "You are a coding agent."}]},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Fix the IndexError in parse_rows()."}]}]
    for i in range(n):
        items.append({"type": "reasoning", "summary": [], "content": None})
        items.append({"type": "function_call", "call_id": f"call_{i}", "name": "Grep",
                      "arguments": json.dumps(ARGS)})
        items.append({"type": "function_call_output", "call_id": f"call_{i}",
                      "output": result})
    return {"model": "m", "input": items, "stream": True}


def chat_body(n: int, result: str = RESULT) -> dict[str, Any]:
    """A Qwen Code-shaped chat completions body: tool_calls and tool messages."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                  {"role": "user", "content": "Fix the IndexError."}]
    for i in range(n):
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{i}", "type": "function",
             "function": {"name": "Grep", "arguments": json.dumps(ARGS, indent=1)}}]})
        msgs.append({"role": "tool", "tool_call_id": f"call_{i}", "content": result})
    return {"model": "m", "messages": msgs}


def ollama_body(n: int, result: str = RESULT) -> dict[str, Any]:
    """An Ollama /api/chat body: tool_calls without ids, arguments as an object, and
    tool messages answering them in order (Ollama's api.Message)."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                  {"role": "user", "content": "Fix the IndexError."}]
    for _ in range(n):
        msgs.append({"role": "assistant", "content": "", "thinking": "Let me search.",
                     "tool_calls": [{"function": {"name": "Grep", "arguments": dict(ARGS)}}]})
        msgs.append({"role": "tool", "content": result, "tool_name": "Grep"})
    return {"model": "m", "messages": msgs}


READERS = [(messages_history, messages_body), (responses_history, responses_body),
           (chat_history, chat_body), (ollama_history, ollama_body)]


@pytest.mark.parametrize(("reader", "body"), READERS)
def test_same_steps_from_every_api(reader: Any, body: Any) -> None:
    """The four APIs' shapes of one conversation give the same steps: name, canonical
    arguments and result, paired by call id (by position on Ollama), after the user's
    instruction."""
    events = reader(body(3), 64)
    assert isinstance(events[0], UserTurn)
    steps = [e for e in events if isinstance(e, Step)]
    assert [(s.name, s.arguments, s.result) for s in steps] == \
        [("Grep", '{"path":".","pattern":"parse_rows"}', RESULT)] * 3
    assert [s.index for s in steps] == sorted(s.index for s in steps)


@pytest.mark.parametrize(("reader", "body"), READERS)
def test_loop_found_on_every_api(reader: Any, body: Any) -> None:
    """Six identical calls with identical results: one repeat finding at the default K,
    with the history indices of the calls; five are not one."""
    config = LoopConfig()
    (found,) = check(reader(body(6), config.window), config)
    assert (found.kind, found.count, found.calls[0].name) == ("repeat", 6, "Grep")
    assert len(set(found.indices)) == 6
    assert check(reader(body(5), config.window), config) == ()


@pytest.mark.parametrize(("reader", "body"), READERS)
def test_polling_on_every_api(reader: Any, body: Any) -> None:
    """The same call with a changing result, on each API, is never a loop."""
    parsed = body(8)
    key = "input" if "input" in parsed else "messages"
    n = 0
    for entry in parsed[key]:
        if entry.get("type") == "function_call_output":
            entry["output"] = f"{n} matches"
            n += 1
        elif entry.get("role") == "tool":
            entry["content"] = f"{n} matches"
            n += 1
        elif entry.get("role") == "user" and isinstance(entry["content"], list):
            for block in entry["content"]:
                if block.get("type") == "tool_result":
                    block["content"] = [{"type": "text", "text": f"{n} matches"}]
                    n += 1
    assert n == 8
    assert check(reader(parsed, 64), LoopConfig()) == ()


def test_replies_and_user_turns() -> None:
    """A text-only assistant turn is a reply, a user message without tool results a user
    turn, on each API."""
    text = "I cannot find the bug, please give me more details about it."
    msgs = {"messages": [{"role": "user", "content": "fix"},
                         {"role": "assistant", "content": [{"type": "text", "text": text}]}]}
    assert messages_history(msgs, 64) == [UserTurn(0), Reply(1, text)]
    chat = {"messages": [{"role": "user", "content": "fix"},
                         {"role": "assistant", "content": text}]}
    assert chat_history(chat, 64) == [UserTurn(0), Reply(1, text)]
    assert ollama_history(chat, 64) == [UserTurn(0), Reply(1, text)]
    resp = {"input": [{"role": "user", "content": "fix"},
                      {"type": "message", "role": "assistant",
                       "content": [{"type": "output_text", "text": text}]}]}
    assert responses_history(resp, 64) == [UserTurn(0), Reply(1, text)]


def test_responses_turn_groups_text_with_calls() -> None:
    """A Responses assistant message followed by a function call is one turn with a call,
    not a text-only reply; a custom tool call counts as a call."""
    body = {"input": [
        {"role": "user", "content": "fix"},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "Let me patch it."}]},
        {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** x"},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "Done"}]}
    assert responses_history(body, 64) == [
        UserTurn(0), Step(2, "apply_patch", '{"input":"*** x"}', "Done")]


def test_string_input_and_malformed_entries() -> None:
    """A string input has no history; malformed entries are skipped, not raised on."""
    assert responses_history({"input": "hi"}, 64) == []
    body = {"messages": ["junk", {"role": "assistant", "tool_calls": "x", "content": 5},
                         {"role": "assistant", "tool_calls": [{"function": "x"}, 3]},
                         {"role": "tool"}]}
    assert chat_history(body, 64) == [Reply(1, "")]
    assert messages_history({"messages": None}, 64) == []


def test_ollama_results_pair_with_calls_in_order() -> None:
    """Ollama's calls carry no ids: the tool messages after an assistant message answer
    its calls in order; a call without a tool message after it has no result, and a
    tool message after a user message answers nothing."""
    body = {"messages": [
        {"role": "user", "content": "fix"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "Read", "arguments": {"path": "a.py"}}},
            {"function": {"index": 1, "name": "Grep", "arguments": {"pattern": "x"}}}]},
        {"role": "tool", "content": "A", "tool_name": "Read"},
        {"role": "tool", "content": "B", "tool_name": "Grep"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "Read", "arguments": {"path": "b.py"}}},
            {"function": {"name": "Grep", "arguments": {"pattern": "y"}}}]},
        {"role": "tool", "content": "C", "tool_name": "Read"},
        {"role": "user", "content": "go on"},
        {"role": "tool", "content": "stray"}]}
    assert ollama_history(body, 64) == [
        UserTurn(0),
        Step(1, "Read", '{"path":"a.py"}', "A"), Step(1, "Grep", '{"pattern":"x"}', "B"),
        Step(4, "Read", '{"path":"b.py"}', "C"), Step(4, "Grep", '{"pattern":"y"}', None),
        UserTurn(6)]


def test_ollama_malformed_entries() -> None:
    """Malformed Ollama entries are skipped, not raised on."""
    body = {"messages": ["junk", {"role": "assistant", "tool_calls": "x", "content": 5},
                         {"role": "assistant", "tool_calls": [{"function": "x"}, 3,
                                                              {"function": {"name": 7}}]},
                         {"role": "tool", "content": None}]}
    assert ollama_history(body, 64) == [Reply(1, "")]
    assert ollama_history({"messages": None}, 64) == []


def test_missing_result() -> None:
    """A call whose result the history lacks has result None."""
    body = chat_body(1)
    body["messages"].pop()
    (step,) = [e for e in chat_history(body, 64) if isinstance(e, Step)]
    assert step.result is None


def test_canonical_arguments() -> None:
    """Key order and spacing do not matter; non-JSON text is kept, stripped."""
    assert canonical_arguments('{"b": 1, "a": {"d": 2, "c": 3}}') == \
        canonical_arguments({"a": {"c": 3, "d": 2}, "b": 1}) == '{"a":{"c":3,"d":2},"b":1}'
    assert canonical_arguments("  ls -la \n") == "ls -la"


class CountingList(list[Any]):
    """A list that counts the entries read from it."""

    reads = 0

    def __getitem__(self, i: Any) -> Any:
        CountingList.reads += 1
        return super().__getitem__(i)


@pytest.mark.parametrize(("reader", "body"), READERS)
@pytest.mark.parametrize(("turns", "result_chars"), [(200, 100), (200, 2000)])
def test_bounded_work(reader: Any, body: Any, turns: int, result_chars: int) -> None:
    """A 200-turn history, and one of about 100k tokens (2,000-character results): the
    reader touches at most 8 x window entries and returns at most window assistant
    events, the trailing ones; the finding is the same as on the trailing part alone."""
    config = LoopConfig()
    parsed = body(turns, result=RESULT + "x" * result_chars)
    key = "input" if "input" in parsed else "messages"
    entries = CountingList(parsed[key])
    CountingList.reads = 0
    events = reader({**parsed, key: entries}, config.window)
    assert CountingList.reads <= 8 * config.window
    assert sum(not isinstance(e, UserTurn) for e in events) == config.window
    (found,) = check(events, config)
    assert found.count == config.window  # the run is as long as the window shows
    assert found.indices[-1] == max(e.index for e in events)
