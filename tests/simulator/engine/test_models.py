"""Each simulated model has the shape its name promises, thinking on and off (over chat)."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import orjson
import pytest

from sidecar.simulator.engine.behaviours import KOREAN_LOOP, LOOP_TOKENS
from sidecar.simulator.engine.tokenizer import tokenize
from tests.simulator.conftest import SimFactory, events, hello

CHAT = "/v1/chat/completions"
OFF_SWITCHES: list[dict[str, Any]] = [
    {"chat_template_kwargs": {"enable_thinking": False}},
    {"chat_template_kwargs": {"thinking": False}},
    {"reasoning_effort": "none"},
]


async def _stream(client: Any, **body: Any) -> list[dict[str, Any]]:
    resp = await client.post(CHAT, json=hello(stream=True, **body))
    assert resp.status == 200, await resp.text()
    payloads = events(await resp.read())
    assert payloads[-1] == b"[DONE]"
    return [orjson.loads(p) for p in payloads[:-1]]


def _split(chunks: list[dict[str, Any]]) -> tuple[str, str, str | None]:
    reasoning = content = ""
    finish = None
    for chunk in chunks:
        for choice in chunk["choices"]:
            reasoning += choice["delta"].get("reasoning", "")
            content += choice["delta"].get("content", "")
            finish = choice["finish_reason"] or finish
    return reasoning, content, finish


def _max_ngram_count(tokens: list[str], n: int) -> int:
    grams = collections.Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))
    return max(grams.values())


async def test_healthy_thinks_then_answers_and_stops(sim: SimFactory) -> None:
    """sim-healthy: long, non-repetitive real reasoning, then content, then stop."""
    client = await sim()
    reasoning, content, finish = _split(await _stream(client, model="sim-healthy"))
    assert finish == "stop"
    assert len(tokenize(reasoning)) > 500
    assert content.strip()
    words = reasoning.split()
    assert _max_ngram_count(words, 8) <= 2, "healthy reasoning must not repeat itself"


async def test_loop_is_the_captured_exact_loop(sim: SimFactory) -> None:
    """sim-loop repeats the captured 22-token cycle in reasoning until max_tokens."""
    client = await sim()
    chunks = await _stream(client, model="sim-loop", max_tokens=67)
    _, content, finish = _split(chunks)
    deltas = [c["choices"][0]["delta"]["reasoning"] for c in chunks[1:]]
    assert deltas == list(LOOP_TOKENS) * 3
    assert content == ""
    assert finish == "length"


async def test_paraphrase_loop_rewords_each_cycle(sim: SimFactory) -> None:
    """sim-paraphrase-loop circles on one idea in changing words, not an exact loop."""
    client = await sim()
    reasoning, _, finish = _split(
        await _stream(client, model="sim-paraphrase-loop", max_tokens=600)
    )
    assert finish == "length"
    sentences = [s.strip() for s in reasoning.replace("?", ".").split(".") if s.strip()]
    assert len(sentences) > 40
    shapes = {"".join(ch for ch in s if not ch.isdigit()) for s in sentences[:-1]}
    assert len(shapes) <= 20, "a few ideas in a few wordings come back again and again"
    assert _max_ngram_count(tokenize(reasoning), 40) == 1, "but never word for word"


async def test_long_thinking_never_stops_thinking(sim: SimFactory) -> None:
    """sim-long-thinking thinks until max_tokens, without an exact loop."""
    client = await sim()
    reasoning, content, finish = _split(
        await _stream(client, model="sim-long-thinking", max_tokens=3000)
    )
    assert finish == "length"
    assert content == ""
    assert _max_ngram_count(reasoning.split(), 8) <= 3


async def test_cjk_loop_is_korean(sim: SimFactory) -> None:
    """sim-cjk-loop loops a Korean sentence, one Hangul syllable per token."""
    client = await sim()
    chunks = await _stream(client, model="sim-cjk-loop", max_tokens=200)
    reasoning, _, finish = _split(chunks)
    assert finish == "length"
    assert reasoning.startswith(KOREAN_LOOP + KOREAN_LOOP)
    deltas = [c["choices"][0]["delta"]["reasoning"] for c in chunks[1:]]
    assert all(len(d.strip()) == 1 for d in deltas)


async def test_leaky_loops_in_content_with_thinking_off(sim: SimFactory) -> None:
    """sim-leaky answers and then loops in content even with thinking off."""
    client = await sim()
    off = OFF_SWITCHES[0]
    reasoning, content, finish = _split(
        await _stream(client, model="sim-leaky", max_tokens=80, **off)
    )
    assert reasoning == ""
    assert content.startswith(" Fix: guard empty lists before indexing!")
    assert content.count(" Hmm, maybe my earlier") >= 2
    assert finish == "length"


async def test_stall_stops_sending(sim: SimFactory) -> None:
    """sim-stall sends some reasoning tokens and then nothing, with the stream open."""
    client = await sim()
    resp = await client.post(CHAT, json=hello(model="sim-stall", stream=True))
    got = b""
    while True:
        try:
            got += await asyncio.wait_for(resp.content.readany(), 0.3)
        except TimeoutError:
            break
    assert got.count(b'"reasoning"') == 24
    assert b'finish_reason":"' not in got
    resp.close()


@pytest.mark.parametrize("switch", OFF_SWITCHES, ids=["enable_thinking", "thinking", "effort"])
@pytest.mark.parametrize(
    "model",
    [
        "sim-healthy",
        "sim-loop",
        "sim-paraphrase-loop",
        "sim-long-thinking",
        "sim-cjk-loop",
        "sim-stall",
        "tiny-qwen",
    ],
)
async def test_thinking_off_gives_short_answer(
    sim: SimFactory, model: str, switch: dict[str, Any]
) -> None:
    """Every model but sim-leaky honours every thinking-off switch with a short answer."""
    client = await sim()
    reasoning, content, finish = _split(await _stream(client, model=model, **switch))
    assert reasoning == ""
    assert 0 < len(tokenize(content)) <= 80
    assert finish == "stop"
    metrics = await (await client.get("/metrics")).text()
    assert f'sim:requests_total{{model_name="{model}",thinking="off"}} 1.0' in metrics


@pytest.mark.parametrize("prompt", ["Hello", "Say OK", "What is 2+2?", "Tell me a story"])
async def test_stall_with_thinking_off_answers_whatever_the_prompt(
    sim: SimFactory, prompt: str
) -> None:
    """sim-stall only stalls while thinking: with thinking off it answers and stops."""
    client = await sim()
    body = hello(
        model="sim-stall",
        stream=True,
        messages=[{"role": "user", "content": prompt}],
        chat_template_kwargs={"enable_thinking": False},
    )
    resp = await client.post(CHAT, json=body)
    chunks = [orjson.loads(p) for p in events(await resp.read())[:-1]]
    reasoning, content, finish = _split(chunks)
    assert reasoning == ""
    assert content.strip()
    assert finish == "stop"


async def test_enable_thinking_true_beats_effort_none(sim: SimFactory) -> None:
    """reasoning_effort=none only applies when chat_template_kwargs has no enable_thinking."""
    client = await sim()
    chunks = await _stream(
        client,
        model="sim-loop",
        max_tokens=5,
        reasoning_effort="none",
        chat_template_kwargs={"enable_thinking": True},
    )
    assert _split(chunks)[0] != ""


async def test_top_level_thinking_field_is_ignored(sim: SimFactory) -> None:
    """vLLM has no top-level `thinking`: it does not turn thinking off."""
    client = await sim()
    reasoning, content, _ = _split(
        await _stream(client, model="sim-loop", max_tokens=5, thinking=False)
    )
    assert reasoning
    assert content == ""


async def test_budget_then_healthy_answers_in_content(sim: SimFactory) -> None:
    """thinking_token_budget ends thinking after N reasoning tokens; the answer follows."""
    client = await sim()
    chunks = await _stream(
        client,
        model="sim-healthy",
        thinking_token_budget=30,
        stream_options={"include_usage": True},
    )
    _, content, finish = _split(chunks)
    with_reasoning = [c for c in chunks if c["choices"] and "reasoning" in c["choices"][0]["delta"]]
    assert len(with_reasoning) == 30
    assert content.strip()
    assert finish == "stop"
    assert chunks[-1]["usage"]["completion_tokens_details"]["reasoning_tokens"] == 30


async def test_continue_final_message_answers_in_reasoning(sim: SimFactory) -> None:
    """Like vLLM 0.32: a continued assistant turn comes back in reasoning, content null."""
    client = await sim()
    body = {
        "model": "sim-loop",
        "messages": [
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "<think>\nI looped.\n</think>\n\n"},
        ],
        "continue_final_message": True,
        "add_generation_prompt": False,
    }
    resp = await client.post(CHAT, json=body)
    assert resp.status == 200
    message = (await resp.json())["choices"][0]["message"]
    assert message["content"] is None
    assert message["reasoning"] == " Fix: guard empty lists before indexing!"
    assert (await resp.json())["choices"][0]["finish_reason"] == "stop"


async def test_continue_with_open_think_keeps_thinking(sim: SimFactory) -> None:
    """A continued turn that ends inside <think> goes on reasoning (no <think> emitted)."""
    client = await sim()
    body = {
        "model": "sim-loop",
        "messages": [
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "<think>\nLet me see."},
        ],
        "continue_final_message": True,
        "add_generation_prompt": False,
        "max_tokens": 22,
    }
    data = await (await client.post(CHAT, json=body)).json()
    assert data["choices"][0]["message"]["reasoning"] == "".join(LOOP_TOKENS)
    assert data["usage"]["completion_tokens"] == 22


async def test_n2_choices_are_interleaved(sim: SimFactory) -> None:
    """n=2: every chunk carries one choice; each choice gets its own finish chunk."""
    client = await sim()
    chunks = await _stream(client, model="sim-healthy", n=2, max_tokens=30)
    assert all(len(c["choices"]) == 1 for c in chunks)
    finishes = [c["choices"][0]["index"] for c in chunks if c["choices"][0]["finish_reason"]]
    assert finishes == [0, 1]
