"""Agent loops across turns on Ollama's native /api/chat (issue 39), driven by the
official ``ollama`` client (its Message: ``tool_calls`` of ``function.name`` and
``function.arguments``, no ids; ``tool`` messages with ``tool_name``) against the
simulator in its Ollama dialect."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from ollama import AsyncClient, ResponseError

from sidecar.apis.ollama.api import OLLAMA_CHAT, OLLAMA_GENERATE
from sidecar.core.agent_loops import NOTE_MARK
from tests.detectors.test_agent_history import ollama_body
from tests.dialects.conftest import DialectStack

MODEL = "sim-healthy"
Clients = Callable[..., AsyncClient]


@pytest.fixture
async def clients() -> AsyncIterator[Clients]:
    """Factory of official Ollama clients (host, then the client's headers), closed
    after the test."""
    made: list[AsyncClient] = []

    def make(host: str, **headers: str) -> AsyncClient:
        made.append(AsyncClient(host=host, headers=headers))
        return made[-1]

    yield make
    for client in made:
        await client.close()  # type: ignore[no-untyped-call]


def history(n: int) -> list[dict[str, Any]]:
    """An agent's /api/chat messages with ``n`` identical Grep calls, each answered."""
    messages: list[dict[str, Any]] = ollama_body(n)["messages"]
    return messages


def loops(stack: Any, action: str) -> float:
    return float(stack.metric("runaway_sidecar_agent_loops_total", route="chat",
                              model=MODEL, kind="repeat", action=action))


async def test_shadow_counts_the_loop(dialect_stack: DialectStack, clients: Clients) -> None:
    """Default (shadow): six identical calls with identical results are counted on the
    chat route, and the client gets its answer."""
    stack = await dialect_stack("ollama")
    reply = await clients(stack.url).chat(model=MODEL, messages=history(6), stream=False)
    assert reply.done is True
    assert loops(stack, "shadow") == 1
    await clients(stack.url).chat(model=MODEL, messages=history(5), stream=False)
    assert loops(stack, "shadow") == 1


async def test_nudge_and_refuse(dialect_stack: DialectStack, clients: Clients) -> None:
    """nudge adds the note (counted as nudge, not passed for want of a place); refuse is
    Ollama's error shape, a 400 the official client raises with the sidecar's message."""
    stack = await dialect_stack("ollama")
    nudged = clients(stack.url, **{"X-Agent-Loops": "nudge"})
    reply = await nudged.chat(model=MODEL, messages=history(6), stream=False)
    assert reply.done is True
    assert loops(stack, "nudge") == 1
    refused = clients(stack.url, **{"X-Agent-Loops": "refuse"})
    with pytest.raises(ResponseError) as info:
        await refused.chat(model=MODEL, messages=history(7))
    assert info.value.status_code == 400
    assert info.value.error.startswith("runaway-sidecar stopped an agent loop")
    assert "`Grep` 7 times" in info.value.error
    assert loops(stack, "refuse") == 1


def test_the_note_is_a_user_message_after_the_results() -> None:
    """The nudge note goes last, as a user message; generate has no history and no place
    for it."""
    body = ollama_body(6)
    noted = OLLAMA_CHAT.with_loop_note(body, f"{NOTE_MARK} stop")
    assert noted is not None
    assert noted["messages"][:-1] == body["messages"]
    assert noted["messages"][-1] == {"role": "user", "content": f"{NOTE_MARK} stop"}
    assert OLLAMA_CHAT.with_loop_note({"messages": body["messages"][:-1]}, "n") is None
    assert OLLAMA_GENERATE.agent_history({"prompt": "x"}, 64) == []
    assert OLLAMA_GENERATE.with_loop_note(body, "n") is None
