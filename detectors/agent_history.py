"""The trailing history of an agent request, per API, as :mod:`detectors.agent_loops` events.

Pure functions over an already-parsed request body (plain dicts and lists, as
``orjson.loads`` gives them); nothing is copied but the tool calls' arguments, made
canonical (JSON with sorted keys and no spaces). Each reads the body from its end and stops
after ``window`` assistant events (tool calls and text-only replies) or ``8 * window``
entries, so the work does not grow with the history. What each API calls things:

- ``POST /v1/messages``: assistant ``tool_use`` blocks (``id``, ``name``, ``input``), their
  ``tool_result`` blocks (``tool_use_id``, ``content``) in the next user message;
- ``POST /v1/responses``: ``function_call`` items (``call_id``, ``name``, ``arguments``)
  and ``function_call_output`` items (``call_id``, ``output``), and the ``custom_tool_call``
  pair (``input``); consecutive assistant-side items (messages, reasoning, calls) are one
  turn;
- ``POST /v1/chat/completions``: assistant ``tool_calls`` (``id``,
  ``function.name``, ``function.arguments``) and ``tool`` messages (``tool_call_id``);
- Ollama's ``POST /api/chat``: assistant ``tool_calls`` (``function.name``,
  ``function.arguments``, an object) without ids, and the ``tool`` messages right after
  the assistant message, which answer its calls in order.

A malformed entry is skipped, never raised on: the request goes upstream as it is and the
upstream judges it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from detectors.agent_loops import Event, Reply, Step, UserTurn

_SPAN = 8  # entries read per assistant event at most


def canonical_arguments(arguments: object) -> str:
    """Canonical text of a call's arguments: JSON with sorted keys and no spaces; a string
    that is not JSON, stripped, as it is."""
    value = arguments
    if isinstance(arguments, str):
        try:
            value = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return arguments.strip()
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        return repr(arguments)


def _text(content: object) -> str:
    """The text of a message's content: a string, or the ``text`` of its parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content
                         if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


class _Builder:
    """Collects events newest first; pairs calls with results seen after them."""

    __slots__ = ("budget", "events", "results")

    def __init__(self, window: int) -> None:
        self.events: list[Event] = []
        self.results: dict[str, object] = {}
        self.budget = window

    def result(self, call_id: object, content: object) -> None:
        if isinstance(call_id, str):
            self.results[call_id] = content

    def call(self, index: int, call_id: object, name: object, arguments: object) -> None:
        if self.budget <= 0 or not isinstance(name, str):
            return
        result = self.results.pop(call_id, None) if isinstance(call_id, str) else None
        self.events.append(Step(index, name, canonical_arguments(arguments), result))
        self.budget -= 1

    def reply(self, index: int, text: str) -> None:
        if self.budget > 0:
            self.events.append(Reply(index, text))
            self.budget -= 1

    def user(self, index: int) -> None:
        self.events.append(UserTurn(index))

    def done(self) -> list[Event]:
        self.events.reverse()
        return self.events


def _entries(out: _Builder, body: Mapping[str, Any], key: str,
             window: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """The last ``_SPAN * window`` entries of ``body[key]`` that are objects, with their
    indices, newest first, while ``out`` has budget left (none when it is not a list)."""
    items = body.get(key)
    if not isinstance(items, list):
        return
    start = max(0, len(items) - _SPAN * window)
    for index in range(len(items) - 1, start - 1, -1):
        if out.budget <= 0:
            return
        item = items[index]
        if isinstance(item, dict):
            yield index, item


def messages_history(body: Mapping[str, Any], window: int) -> list[Event]:
    """``POST /v1/messages``: the trailing history of ``body["messages"]``, oldest first."""
    out = _Builder(window)
    for index, message in _entries(out, body, "messages", window):
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        if message.get("role") == "assistant":
            calls = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]
            for block in reversed(calls):
                out.call(index, block.get("id"), block.get("name"), block.get("input"))
            if not calls:
                out.reply(index, _text(content))
        elif message.get("role") == "user":
            found = False
            for block in blocks:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    out.result(block.get("tool_use_id"), block.get("content"))
                    found = True
            if not found:
                out.user(index)
    return out.done()


_ASSISTANT_ITEMS = {"function_call", "custom_tool_call", "reasoning"}


def _is_assistant_item(item: Mapping[str, Any]) -> bool:
    kind = item.get("type", "message")
    return kind in _ASSISTANT_ITEMS or (kind == "message" and item.get("role") == "assistant")


def responses_history(body: Mapping[str, Any], window: int) -> list[Event]:
    """``POST /v1/responses``: the trailing history of ``body["input"]`` (a string input
    has none), oldest first."""
    out = _Builder(window)
    group: list[tuple[int, Mapping[str, Any]]] = []  # one assistant turn, newest first

    def flush() -> None:
        calls = [(i, it) for i, it in group
                 if it.get("type") in ("function_call", "custom_tool_call")]
        for index, item in calls:
            arguments = item.get("arguments") if item.get("type") == "function_call" \
                else {"input": item.get("input")}
            out.call(index, item.get("call_id"), item.get("name"), arguments)
        if not calls:
            texts = [(i, _text(it.get("content"))) for i, it in group
                     if it.get("type", "message") == "message"]
            if texts:
                out.reply(texts[0][0], "\n".join(t for _, t in reversed(texts)))
        group.clear()

    for index, item in _entries(out, body, "input", window):
        if _is_assistant_item(item):
            group.append((index, item))
            continue
        if group:
            flush()
        kind = item.get("type", "message")
        if kind in ("function_call_output", "custom_tool_call_output"):
            out.result(item.get("call_id"), item.get("output"))
        elif kind == "message" and item.get("role") == "user":
            out.user(index)
    if group:
        flush()
    return out.done()


def chat_history(body: Mapping[str, Any], window: int) -> list[Event]:
    """``POST /v1/chat/completions``: the trailing history of ``body["messages"]``,
    oldest first."""
    out = _Builder(window)
    for index, message in _entries(out, body, "messages", window):
        role = message.get("role")
        if role == "assistant":
            calls = _chat_calls(message)
            for call in reversed(calls):
                function = call.get("function")
                if isinstance(function, dict):
                    out.call(index, call.get("id"), function.get("name"),
                             function.get("arguments"))
            if not calls:
                out.reply(index, _text(message.get("content")))
        elif role == "tool":
            out.result(message.get("tool_call_id"), message.get("content"))
        elif role == "user":
            out.user(index)
    return out.done()


def _chat_calls(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    calls = message.get("tool_calls")
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def ollama_history(body: Mapping[str, Any], window: int) -> list[Event]:
    """Ollama's ``POST /api/chat``: the trailing history of ``body["messages"]``, oldest
    first. Calls have no ids: the ``tool`` messages that follow an assistant message
    are its calls' results, by position (as Ollama renders them to the model)."""
    out = _Builder(window)
    results: list[object] = []  # the tool messages after this entry, newest first
    for index, message in _entries(out, body, "messages", window):
        role = message.get("role")
        if role == "tool":
            results.append(message.get("content"))
            continue
        if role == "assistant":
            calls = _chat_calls(message)
            answers = results[::-1]
            for position in range(len(calls) - 1, -1, -1):
                function = calls[position].get("function")
                if isinstance(function, dict):
                    key = f"{index}.{position}"
                    if position < len(answers):
                        out.result(key, answers[position])
                    out.call(index, key, function.get("name"), function.get("arguments"))
            if not calls:
                out.reply(index, _text(message.get("content")))
        elif role == "user":
            out.user(index)
        results.clear()
    return out.done()
