"""The simulator's llama.cpp dialect against a real llama-server (tests/data/captures/llama.cpp).

Those captures come from the tiny scripted models (tests/e2e/tiny_model.py, as GGUF), whose
text and tokenizer differ from the simulator's, so the comparison is of wire structure:
every byte of every event must match once the generated text, ids, timestamps, model
names, token counts and the ``timings`` durations are blanked. The set of distinct event
shapes, and the first and last events in order, must be the same; JSON bodies must match
whole. Each request is the recorded one, with the model renamed to its simulated twin.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from sidecar.dialects import DIALECTS, ProbeAnswer, detect
from tests.simulator.conftest import SimFactory

CAPTURES = Path(__file__).parent.parent / "data" / "captures" / "llama.cpp"
MANIFEST = orjson.loads((CAPTURES / "manifest.json").read_bytes())
MODELS = {"tiny-loop": "sim-loop", "tiny-leaky": "sim-leaky"}
_BLANKS = (
    (re.compile(rb'"(reasoning_content|content|text|message)":"(?:[^"\\]|\\.)*"'),
     rb'"\1":"~"'),
    (re.compile(rb'"(id|system_fingerprint)":"[^"]*"'), rb'"\1":"~"'),
    (re.compile(rb'"(created|prompt_tokens|completion_tokens|total_tokens|cached_tokens'
                rb'|n_prompt_tokens|cache_n|prompt_n|predicted_n)":\d+'), rb'"\1":0'),
    (re.compile(rb'"(prompt_ms|prompt_per_token_ms|prompt_per_second|predicted_ms'
                rb'|predicted_per_token_ms|predicted_per_second)":[-0-9.e+]+'), rb'"\1":0'),
    (re.compile(rb'"model":"[^"]*"'), b'"model":"~"'),
)
# Compared: the request kinds the simulator models with the loop and leaky models. Not
# compared: the healthy model (the simulator's healthy trace is another text), a budget
# that ends thinking part-way (the tiny loop model then answers; the simulator's loop
# keeps looping, as in tests/simulator/test_e2e_captures.py), and the salvage request
# (the tiny model answers at once; the simulator continues the reasoning first).
FILES = [
    "chat_thinking_loop.sse", "chat_thinking_loop_usage.sse", "chat_thinking_loop_nonstream.json",
    "chat_thinking_off_answer.sse", "chat_thinking_off_nonstream.json",
    "chat_reasoning_effort_none.sse", "chat_thinking_budget_tokens_0.sse",
    "chat_reasoning_budget_tokens_0.sse", "chat_vllm_thinking_token_budget_20.sse",
    "chat_leaky_thinking_off_loop.sse", "chat_leaky_thinking_off_nonstream.json",
    "chat_n2.sse", "completions_raw_think_tags.sse", "error_context_overflow.json",
    "error_context_overflow.sse", "error_messages_missing.json", "error_unknown_model.json",
]


# llama.cpp runs the choices of n > 1 as separate tasks, which start and end in whatever
# order they happen to: there the order of events is compared without the choice index
# (the set of shapes still is compared with it).
UNORDERED = {"chat_n2.sse"}
_INDEX = re.compile(rb'"index":\d+')


def blank(data: bytes) -> bytes:
    for pattern, replacement in _BLANKS:
        data = pattern.sub(replacement, data)
    return data


def shapes(data: bytes) -> tuple[list[bytes], set[bytes]]:
    events = [blank(e) for e in data.split(b"\n\n") if e]
    return events, set(events)


def unindexed(events: list[bytes]) -> list[bytes]:
    return [_INDEX.sub(b'"index":0', e) for e in events]


def case(name: str) -> dict[str, Any]:
    for entry in MANIFEST["captures"]:
        if entry["file"] == name:
            return entry  # type: ignore[no-any-return]
    raise KeyError(name)


async def _replay(sim: SimFactory, name: str) -> tuple[int, bytes, Any]:
    entry = case(name)
    request = dict(entry["request"])
    request["model"] = MODELS.get(request["model"], request["model"])
    # One slot's context, as the real server had it (-c 8192 -np 2).
    client = await sim(dialect="llamacpp", max_model_len=4096)
    resp = await client.post(entry["path"], json=request)
    return resp.status, await resp.read(), resp.headers


@pytest.mark.parametrize("name", FILES)
async def test_structure_matches_real_llamacpp(sim: SimFactory, name: str) -> None:
    """Every event shape the real llama-server sent, and only those, comes from the
    simulator's llamacpp dialect; JSON bodies match whole."""
    status, ours, _ = await _replay(sim, name)
    theirs = (CAPTURES / name).read_bytes()
    assert status == case(name)["status"]
    if name.endswith(".json") or not theirs.startswith(b"data: "):
        assert blank(ours).strip() == blank(theirs).strip()
        return
    our_events, our_set = shapes(ours)
    their_events, their_set = shapes(theirs)
    assert our_set == their_set
    if name in UNORDERED:
        our_events, their_events = unindexed(our_events), unindexed(their_events)
    assert our_events[:2] == their_events[:2]
    assert our_events[-3:] == their_events[-3:]


@pytest.mark.parametrize(("name", "headers_file"), [
    ("chat_thinking_loop.sse", "response_headers_stream.txt"),
    ("chat_thinking_loop_nonstream.json", "response_headers_nonstream.txt"),
    ("error_context_overflow.json", "response_headers_error.txt"),
])
async def test_headers_match_real_llamacpp(sim: SimFactory, name: str, headers_file: str) -> None:
    """The simulator answers with llama-server's Server and Content-Type headers."""
    _, _, headers = await _replay(sim, name)
    head = (CAPTURES / headers_file).read_bytes().split(b"\n\n", 1)[0].decode()
    wanted = dict(line.split(": ", 1) for line in head.splitlines()[1:] if ": " in line)
    for key in ("Server", "Content-Type"):
        assert headers[key] == wanted[key], key


def test_detect_reads_the_real_props() -> None:
    """dialect = "auto" recognises the real server's GET /props and Server header."""
    props = (CAPTURES / "props.json").read_bytes()
    found = detect({"/props": ProbeAnswer(200, "llama.cpp", props)})
    assert found.dialect is DIALECTS["llamacpp"]
    assert found.certain
    body_only = detect({"/props": ProbeAnswer(200, "", props)})
    assert body_only.dialect is DIALECTS["llamacpp"]


def _deltas(data: bytes) -> list[dict[str, Any]]:
    return [c["delta"] for e in data.split(b"\n\n") if e.startswith(b"data: {")
            for c in orjson.loads(e[6:]).get("choices", [])]


async def test_n2_each_choice_ends_with_its_own_usage(sim: SimFactory) -> None:
    """With n=2 and include_usage, each choice gets its own finish chunk and its own usage
    chunk (llama.cpp runs them as two tasks), and the usage counts that choice alone."""
    _, ours, _ = await _replay(sim, "chat_n2.sse")
    theirs = (CAPTURES / "chat_n2.sse").read_bytes()
    for data in (ours, theirs):
        usages = [orjson.loads(e[6:])["usage"] for e in data.split(b"\n\n")
                  if e.startswith(b'data: {"choices":[]')]
        assert len(usages) == 2
        assert [u["completion_tokens"] for u in usages] == [24, 24]


@pytest.mark.parametrize("name", ["chat_thinking_off_answer.sse", "chat_reasoning_effort_none.sse",
                                  "chat_thinking_budget_tokens_0.sse"])
async def test_thinking_off_answer_starts_with_the_prefilled_newlines(
        sim: SimFactory, name: str) -> None:
    """With thinking off the content starts with the "\\n\\n" the template pre-filled after
    </think>, as llama.cpp sends it, and holds no reasoning."""
    _, ours, _ = await _replay(sim, name)
    theirs = (CAPTURES / name).read_bytes()
    for data in (ours, theirs):
        deltas = _deltas(data)
        content = "".join(d.get("content") or "" for d in deltas)
        assert content.startswith("\n\n")
        assert not content.startswith("\n\n\n")
        assert not any(d.get("reasoning_content") for d in deltas)


async def test_thinking_off_body_starts_with_the_prefilled_newlines(sim: SimFactory) -> None:
    """The non-streaming thinking-off body's content starts with "\\n\\n", as llama.cpp's."""
    _, ours, _ = await _replay(sim, "chat_thinking_off_nonstream.json")
    theirs = (CAPTURES / "chat_thinking_off_nonstream.json").read_bytes()
    for data in (ours, theirs):
        message = orjson.loads(data)["choices"][0]["message"]
        assert message["content"].startswith("\n\n")
        assert "reasoning_content" not in message


async def test_max_tokens_beyond_the_context_runs_to_its_end(sim: SimFactory) -> None:
    """llama.cpp takes max_tokens beyond the context and stops at the context's end with
    length (vLLM answers 400); the simulator does the same in this dialect."""
    client = await sim(dialect="llamacpp", max_model_len=256)
    resp = await client.post("/v1/chat/completions", json={
        "model": "sim-loop", "max_tokens": 100000,
        "messages": [{"role": "user", "content": "Hello"}]})
    body = orjson.loads(await resp.read())
    assert resp.status == 200
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["total_tokens"] == 256
