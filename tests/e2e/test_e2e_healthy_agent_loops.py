"""Real vLLM, healthy model, agent loops (issue 39): a looping agent history sent through
the sidecar with ``X-Agent-Loops: nudge`` goes upstream with the note and real vLLM
answers it (200, an answer) on chat completions, messages and responses; with
``X-Agent-Loops: refuse`` the official SDK raises its own ``BadRequestError`` with the
sidecar's message, and nothing reaches vLLM."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest

from tests.detectors.test_agent_history import chat_body, messages_body, responses_body

pytestmark = pytest.mark.vllm

APIS = ("chat", "messages", "responses")
#: Six identical calls with identical results: the default ``repeat_min``.
CALLS = 6
MAX_TOKENS = 1024


def _body(api: str, tag: str) -> dict[str, Any]:
    """A looping history of ``api``, unique to this call (the runaway memory never recalls
    it), for the healthy model."""
    if api == "chat":
        body = chat_body(CALLS)
        body["messages"][1]["content"] += f" [{tag}]"
        return {"messages": body["messages"], "max_tokens": MAX_TOKENS}
    if api == "messages":
        body = messages_body(CALLS)
        body["messages"][0]["content"][0]["text"] += f" [{tag}]"
        return {"messages": body["messages"], "max_tokens": MAX_TOKENS}
    body = responses_body(CALLS)
    body["input"][1]["content"][0]["text"] += f" [{tag}]"
    # The SDK's input item types have no reasoning item without an id or summary text.
    items = [i for i in json.loads(json.dumps(body["input"])) if i["type"] != "reasoning"]
    return {"input": items, "max_output_tokens": MAX_TOKENS}


def _create(node, api: str, mode: str, tag: str) -> Any:
    """One request of ``api`` through the sidecar's official SDK client, with the mode."""
    headers = {"X-Agent-Loops": mode}
    body = {"model": node.model, **_body(api, tag)}
    if api == "chat":
        return node.client().chat.completions.create(extra_headers=headers, **body)
    return node.agent_client(api).create(extra_headers=headers, **body)


def _answer(api: str, done: Any) -> str:
    if api == "chat":
        text: str = done.choices[0].message.content or ""
        return text
    if api == "messages":
        return "".join(b.text for b in done.content if b.type == "text")
    out: str = done.output_text
    return out


@pytest.mark.parametrize("api", APIS)
def test_nudge_accepted_by_vllm(healthy_node, api, e2e_report) -> None:
    """nudge: the note goes upstream once and real vLLM answers the body (200, the model's
    answer); the sidecar counts the loop with action nudge."""
    before = healthy_node.sidecar_metric("runaway_sidecar_agent_loops_total", route=api,
                                         action="nudge")
    done = _create(healthy_node, api, "nudge", f"{api}-nudge")
    after = healthy_node.sidecar_metric("runaway_sidecar_agent_loops_total", route=api,
                                        action="nudge")
    assert _answer(api, done).strip() == healthy_node.script["answer"]
    assert after - before == 1
    e2e_report(f"agent_loops_{api}_nudge", answer=_answer(api, done).strip()[:60])


@pytest.mark.parametrize("api", APIS)
def test_refuse_is_the_sdks_bad_request(healthy_node, api) -> None:
    """refuse: the SDK raises its BadRequestError (400) with the sidecar's message, and
    vLLM prefilled nothing."""
    before = healthy_node.metrics()
    error = anthropic.BadRequestError if api == "messages" else openai.BadRequestError
    with pytest.raises(error) as raised:
        _create(healthy_node, api, "refuse", f"{api}-refuse")
    assert raised.value.status_code == 400
    assert "runaway-sidecar stopped an agent loop" in raised.value.message
    assert f"{CALLS} times in a row" in raised.value.message
    assert healthy_node.metrics().prompt_tokens == before.prompt_tokens
