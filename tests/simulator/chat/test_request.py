"""Chat request validation, limits, usage, ids and replay, as vLLM answers them."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.simulator.conftest import SimFactory, events, hello

CHAT = "/v1/chat/completions"


async def _error(client: Any, body: dict[str, Any], path: str = CHAT) -> dict[str, Any]:
    resp = await client.post(path, json=body)
    assert resp.status == 400
    assert resp.headers["content-type"] == "application/json"
    error: dict[str, Any] = orjson.loads(await resp.read())["error"]
    assert list(error) == ["message", "type", "param", "code"]
    assert error["type"] == "BadRequestError"
    assert error["code"] == 400
    return error


async def test_stream_options_without_stream_is_400(sim: SimFactory) -> None:
    """stream_options is only allowed with stream=true."""
    client = await sim()
    error = await _error(client, hello(stream_options={"include_usage": True}))
    assert error["param"] == "stream_options"
    assert "stream=True" in error["message"]


async def test_both_generation_prompt_and_continue_is_400(sim: SimFactory) -> None:
    """add_generation_prompt and continue_final_message cannot both be true."""
    client = await sim()
    body = hello(continue_final_message=True, add_generation_prompt=True)
    error = await _error(client, body)
    assert "continue_final_message" in error["message"]


@pytest.mark.parametrize("budget", [True, 1.5, -2, "10"])
async def test_bad_thinking_budget_is_400(sim: SimFactory, budget: Any) -> None:
    """thinking_token_budget must be an int >= -1 (booleans and floats are refused)."""
    client = await sim()
    error = await _error(client, hello(thinking_token_budget=budget))
    assert error["param"] == "thinking_token_budget"


async def test_budget_minus_one_is_unlimited(sim: SimFactory) -> None:
    """A budget of -1 leaves thinking alone."""
    client = await sim()
    data = await (
        await client.post(CHAT, json=hello(max_tokens=30, thinking_token_budget=-1))
    ).json()
    assert data["usage"]["completion_tokens_details"]["reasoning_tokens"] == 29


async def test_max_completion_tokens_wins(sim: SimFactory) -> None:
    """max_completion_tokens takes precedence over max_tokens."""
    client = await sim()
    body = hello(max_tokens=40, max_completion_tokens=7)
    data = await (await client.post(CHAT, json=body)).json()
    assert data["usage"]["completion_tokens"] == 7
    assert data["choices"][0]["finish_reason"] == "length"


async def test_default_limit_is_context_minus_prompt(sim: SimFactory) -> None:
    """Without max_tokens a loop runs until max_model_len - prompt_tokens."""
    client = await sim(max_model_len=100)
    data = await (await client.post(CHAT, json=hello())).json()
    assert data["usage"]["prompt_tokens"] == 9
    assert data["usage"]["completion_tokens"] == 91
    assert data["usage"]["total_tokens"] == 100


async def test_prompt_plus_max_tokens_over_context_is_400(sim: SimFactory) -> None:
    """A request that cannot fit the context is refused up front."""
    client = await sim(max_model_len=100)
    error = await _error(client, hello(max_tokens=95))
    assert error["param"] == "max_tokens"


async def test_usage_not_sent_unless_asked(sim: SimFactory) -> None:
    """Without include_usage no chunk has usage and the finish chunk has the fingerprint."""
    client = await sim()
    body = hello(stream=True, max_tokens=5, stream_options={"continuous_usage_stats": True})
    chunks = [
        orjson.loads(p) for p in events(await (await client.post(CHAT, json=body)).read())[:-1]
    ]
    assert all("usage" not in c for c in chunks)
    assert "system_fingerprint" in chunks[-1]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


async def test_n2_usage_is_summed(sim: SimFactory) -> None:
    """With n=2 the final usage chunk adds both choices, as vLLM does."""
    client = await sim()
    body = hello(stream=True, n=2, max_tokens=12, stream_options={"include_usage": True})
    chunks = [
        orjson.loads(p) for p in events(await (await client.post(CHAT, json=body)).read())[:-1]
    ]
    assert chunks[-1]["usage"]["completion_tokens"] == 24
    assert chunks[-1]["usage"]["completion_tokens_details"]["reasoning_tokens"] == 22
    assert all("system_fingerprint" not in c for c in chunks[:-1])


async def test_n2_non_streaming(sim: SimFactory) -> None:
    """A non-streaming n=2 body has two choices, indexed 0 and 1."""
    client = await sim()
    data = await (await client.post(CHAT, json=hello(n=2, max_tokens=12))).json()
    assert [c["index"] for c in data["choices"]] == [0, 1]
    assert data["usage"]["completion_tokens"] == 24


async def test_request_id_header_names_the_response(sim: SimFactory) -> None:
    """The response id is chatcmpl- plus X-Request-Id when the client gives one."""
    client = await sim()
    resp = await client.post(CHAT, json=hello(max_tokens=2), headers={"X-Request-Id": "abc123"})
    assert (await resp.json())["id"] == "chatcmpl-abc123"


async def test_invalid_json_is_400(sim: SimFactory) -> None:
    """A body that is not JSON gets a 400 error body."""
    client = await sim()
    resp = await client.post(CHAT, data=b"{nope", headers={"content-type": "application/json"})
    assert resp.status == 400
    assert orjson.loads(await resp.read())["error"]["code"] == 400


async def test_replay_splits_think_tags(sim: SimFactory, tmp_path: Any) -> None:
    """sim-replay streams a trace picked by X-Sim-Trace, split on <think>/</think>."""
    path = tmp_path / "traces.jsonl"
    rows = [
        {"id": "a", "text": "<think>\nFirst idea.\n</think>\n\nAnswer A."},
        {"id": "b", "text": "<think>\nNever ends, never ends"},
    ]
    path.write_text("\n".join(orjson.dumps(r).decode() for r in rows), encoding="utf-8")
    client = await sim(replay_file=path)
    data = await (await client.post(CHAT, json=hello(model="sim-replay"))).json()
    message = data["choices"][0]["message"]
    assert message["reasoning"] == "\nFirst idea.\n"
    assert message["content"] == "\n\nAnswer A."
    assert data["choices"][0]["finish_reason"] == "stop"
    resp = await client.post(CHAT, json=hello(model="sim-replay"), headers={"X-Sim-Trace": "b"})
    data = await resp.json()
    assert data["choices"][0]["message"]["reasoning"] == "\nNever ends, never ends"
    assert data["choices"][0]["message"]["content"] is None
    assert data["choices"][0]["finish_reason"] == "length"
    resp = await client.post(CHAT, json=hello(model="sim-replay"), headers={"X-Sim-Trace": "1"})
    assert (await resp.json())["choices"][0]["message"]["reasoning"] == "\nNever ends, never ends"
    resp = await client.post(CHAT, json=hello(model="sim-replay"), headers={"X-Sim-Trace": "zz"})
    assert resp.status == 404


async def test_replay_unavailable_without_file(sim: SimFactory) -> None:
    """Without a replay file, sim-replay is not one of the node's models."""
    client = await sim()
    resp = await client.post(CHAT, json=hello(model="sim-replay"))
    assert resp.status == 404


async def test_include_reasoning_false_hides_reasoning(sim: SimFactory) -> None:
    """include_reasoning=false: reasoning is generated (and counted) but never sent."""
    client = await sim()
    body = hello(
        model="sim-healthy",
        stream=True,
        include_reasoning=False,
        thinking_token_budget=10,
        stream_options={"include_usage": True},
    )
    chunks = [
        orjson.loads(p) for p in events(await (await client.post(CHAT, json=body)).read())[:-1]
    ]
    assert all("reasoning" not in c["choices"][0]["delta"] for c in chunks if c["choices"])
    assert chunks[-1]["usage"]["completion_tokens_details"]["reasoning_tokens"] == 10
    data = await (
        await client.post(CHAT, json=hello(model="sim-loop", max_tokens=5, include_reasoning=False))
    ).json()
    assert data["choices"][0]["message"]["reasoning"] is None
