"""The agent APIs of the simulator against real bytes (copies in tests/data/captures).

The models behind the captures are the e2e suite's tiny loop and healthy models
(tests/e2e/tiny_model.py; the shared captures and those recorded here); the node replays
their exact text (``sim-replay`` under the served name), so every byte must
match except what a server draws afresh for each request, normalized here:

- ids (``chatcmpl-``, ``resp_``, ``rs_``, ``msg_`` + random digits) become ``<id:N>``,
  numbered in order of first appearance, so an item keeps one id across its events;
- ``created_at``/``completed_at`` and thinking-block ``signature`` values;
- the prompt's token count: the simulator's pseudo-tokenizer counts the captures' prompt 14
  tokens shorter than the tiny model's BPE tokenizer, so every captured ``input_tokens``
  and ``total_tokens`` is shifted by the difference measured on ``count_tokens`` (the 4
  tokens of the pre-filled think block agree in both);
- llama.cpp only: its prompt cache (``cache_read_input_tokens``, ``cached_tokens``) is
  folded into ``input_tokens`` (the simulated node keeps no cache), and ``timings`` values.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient

from tests.simulator.conftest import SimFactory

DATA = Path(__file__).parent.parent / "data" / "captures"
VLLM = DATA / "vllm-0.32.0-agent-apis"
LLAMA = DATA / "llama.cpp-agent-apis"
PROMPT = "Fix the IndexError in parse_rows()."
CAPTURED_PROMPT_TOKENS = 32  # messages_count_tokens.json


def _tiny_model() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "agent_tiny_model", Path(__file__).parent.parent / "e2e" / "tiny_model.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TINY = _tiny_model()


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    """The tiny loop model as a replay trace: its loop inside an open think block, and its
    thinking-off answer."""
    path = tmp_path / "tiny_loop.jsonl"
    record = {"id": "tiny-loop", "source": "tests/e2e/tiny_model.py LOOP_EN, ANSWER_EN",
              "text": "<think>" + TINY.LOOP_EN * 10, "answer": TINY.ANSWER_EN}
    path.write_bytes(orjson.dumps(record) + b"\n")
    return path


async def _node(sim: SimFactory, trace_file: Path, name: str, **config: Any) -> TestClient[
        Any, Any]:
    return await sim(served_model_name=name, served_model_behaviour="sim-replay",
                     replay_file=trace_file, **config)


def _messages(model: str, max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {"model": model, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": PROMPT}], **extra}


def _responses(model: str, max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {"model": model, "input": PROMPT, "max_output_tokens": max_tokens, **extra}


def _numbered_ids(pattern: str) -> Callable[[bytes], bytes]:
    regex = re.compile(pattern.encode())

    def apply(data: bytes) -> bytes:
        seen: dict[bytes, int] = {}

        def name(match: re.Match[bytes]) -> bytes:
            number = seen.setdefault(match.group(0), len(seen) + 1)
            return match.group(1) + f"<id:{number}>".encode()

        return regex.sub(name, data)

    return apply


def _shift(delta: int) -> Callable[[bytes], bytes]:
    regex = re.compile(rb'"(input_tokens|original_input_tokens|total_tokens)":(\d+)')
    return lambda data: regex.sub(
        lambda m: b'"%s":%d' % (m.group(1), int(m.group(2)) - delta), data)


_TIMES = re.compile(rb'"(created_at|completed_at)":\d+')
_SIGNATURE = re.compile(rb'"signature":"[0-9a-f]{32}"')


def _vllm_normalize(data: bytes) -> bytes:
    data = _numbered_ids(r"(chatcmpl-|resp_|rs_|msg_)[0-9a-f]{16}")(data)
    data = _TIMES.sub(rb'"\1":0', data)
    return _SIGNATURE.sub(b'"signature":"<sig>"', data)


async def _sim_prompt_tokens(client: TestClient[Any, Any], model: str) -> int:
    resp = await client.post("/v1/messages/count_tokens", json={
        "model": model, "messages": [{"role": "user", "content": PROMPT}]})
    count: int = orjson.loads(await resp.read())["input_tokens"]
    return count


def _headers(path: Path) -> dict[str, str]:
    lines = path.read_bytes().decode().split("\r\n")
    return {k.lower(): v for k, _, v in (line.partition(": ") for line in lines[1:] if line)}


VLLM_CASES: list[tuple[str, str, dict[str, Any], int]] = [
    ("messages_thinking_loop.sse", "/v1/messages", _messages("tiny-loop", 120, stream=True),
     200),
    ("messages_thinking_loop_nonstream.json", "/v1/messages", _messages("tiny-loop", 120), 200),
    ("messages_thinking_disabled.sse", "/v1/messages",
     _messages("tiny-loop", 120, stream=True, thinking={"type": "disabled"}), 200),
    ("messages_thinking_disabled_nonstream.json", "/v1/messages",
     _messages("tiny-loop", 120, thinking={"type": "disabled"}), 200),
    ("messages_enable_thinking_false.sse", "/v1/messages",
     _messages("tiny-loop", 120, stream=True,
               chat_template_kwargs={"enable_thinking": False}), 200),
    ("messages_count_tokens.json", "/v1/messages/count_tokens",
     {"model": "tiny-loop", "messages": [{"role": "user", "content": PROMPT}]}, 200),
    ("responses_thinking_loop.sse", "/v1/responses", _responses("tiny-loop", 120, stream=True),
     200),
    ("responses_thinking_loop_nonstream.json", "/v1/responses", _responses("tiny-loop", 120),
     200),
    ("responses_effort_none.sse", "/v1/responses",
     _responses("tiny-loop", 120, stream=True, reasoning={"effort": "none"}), 200),
    ("responses_effort_none_nonstream.json", "/v1/responses",
     _responses("tiny-loop", 120, reasoning={"effort": "none"}), 200),
    ("error_messages_bad_request.json", "/v1/messages",
     {"model": "tiny-loop", "messages": "x"}, 400),
    ("error_responses_bad_request.json", "/v1/responses", {"model": "tiny-loop", "input": 5},
     400),
    ("error_responses_background.json", "/v1/responses",
     {"model": "tiny-loop", "input": PROMPT, "background": True}, 400),
]


@pytest.mark.parametrize(("capture", "path", "body", "status"), VLLM_CASES,
                         ids=[c[0] for c in VLLM_CASES])
async def test_vllm_bytes(sim: SimFactory, trace_file: Path, capture: str, path: str,
                          body: dict[str, Any], status: int) -> None:
    """Each captured vLLM 0.32.0 answer comes back byte for byte, up to fresh draws."""
    client = await _node(sim, trace_file, "tiny-loop")
    delta = CAPTURED_PROMPT_TOKENS - await _sim_prompt_tokens(client, "tiny-loop")
    assert delta == 14
    resp = await client.post(path, json=body)
    ours = await resp.read()
    theirs = (VLLM / capture).read_bytes()
    assert resp.status == status
    assert _vllm_normalize(ours) == _shift(delta)(_vllm_normalize(theirs))


@pytest.mark.parametrize("capture", [c[0] for c in VLLM_CASES])
async def test_vllm_headers(sim: SimFactory, trace_file: Path, capture: str) -> None:
    """Status line, server, content type, vary and framing match each captured answer."""
    _, path, body, _ = next(c for c in VLLM_CASES if c[0] == capture)
    client = await _node(sim, trace_file, "tiny-loop")
    resp = await client.post(path, json=body)
    await resp.read()
    wanted = _headers(VLLM / f"{capture}.headers.txt")
    head = (VLLM / f"{capture}.headers.txt").read_bytes().split(b"\r\n", 1)[0].decode()
    assert head == f"HTTP/1.1 {resp.status} {resp.reason}"
    for name in ("server", "content-type", "vary", "transfer-encoding"):
        assert resp.headers.get(name) == wanted.get(name), name
    assert ("content-length" in resp.headers) == ("content-length" in wanted)


def test_the_stream_ends_without_done_and_counts_every_token() -> None:
    """The captured streams: no [DONE], 119 reasoning deltas for 120 output tokens (the
    unseen <think> is counted), a signature before the thinking block closes."""
    messages = (VLLM / "messages_thinking_loop.sse").read_bytes()
    responses = (VLLM / "responses_thinking_loop.sse").read_bytes()
    assert b"[DONE]" not in messages + responses
    assert messages.count(b'"type":"thinking_delta"') == 119
    assert responses.count(b"event: response.reasoning_text.delta\n") == 119
    assert messages.index(b'"signature_delta"') < messages.index(b"content_block_stop")


# ------------------------------------------------------- recorded here (healthy model)

RECORDED = DATA / "vllm-0.32.0-agent-apis-recorded"
RECORDED_CASES = orjson.loads((RECORDED / "manifest.json").read_bytes())["captures"]


@pytest.fixture
def healthy_trace(tmp_path: Path) -> Path:
    """The tiny healthy model as a replay trace: its thought, then its answer."""
    path = tmp_path / "tiny_healthy.jsonl"
    text = f"<think>{TINY.HEALTHY_THOUGHT}</think>\n\n{TINY.ANSWER_EN}"
    path.write_bytes(orjson.dumps({"id": "tiny-healthy", "text": text}) + b"\n")
    return path


@pytest.mark.parametrize("case", RECORDED_CASES, ids=[c["file"] for c in RECORDED_CASES])
async def test_vllm_recorded_bytes(sim: SimFactory, healthy_trace: Path,
                                   case: dict[str, Any]) -> None:
    """Thinking then text on both APIs, hidden reasoning, ids from the request, count_tokens
    with thinking off, unknown ids and models, limits: vLLM's bytes, up to fresh draws."""
    client = await _node(sim, healthy_trace, "tiny-healthy")
    off = {"model": "tiny-healthy", "messages": [{"role": "user", "content": PROMPT}],
           "thinking": {"type": "disabled"}}
    ours_off = orjson.loads(await (await client.post("/v1/messages/count_tokens",
                                                     json=off)).read())["input_tokens"]
    theirs_off = orjson.loads((RECORDED / "messages_count_tokens_thinking_disabled.json")
                              .read_bytes())["input_tokens"]
    delta = theirs_off - ours_off
    assert delta == 14
    if case["method"] == "GET":
        resp = await client.get(case["path"])
    else:
        resp = await client.post(case["path"], json=case["request"], headers=case["headers"])
    ours = await resp.read()
    theirs = (RECORDED / case["file"]).read_bytes()
    assert resp.status == case["status"]
    if "unknown_model" in case["file"]:  # the node serves the sim-* names besides
        models = orjson.loads(await (await client.get("/v1/models")).read())["data"]
        aliases = ", ".join(m["id"] for m in models)
        assert "tiny-healthy" in aliases
        theirs = theirs.replace(b"Valid aliases: tiny-healthy.",
                                f"Valid aliases: {aliases}.".encode())
    assert _vllm_normalize(ours) == _shift(delta)(_vllm_normalize(theirs))
    wanted = _headers(RECORDED / f"{case['file']}.headers.txt")
    for name in ("server", "content-type", "vary", "transfer-encoding"):
        assert resp.headers.get(name) == wanted.get(name), name


# --------------------------------------------------------------------- rebuilt errors

REBUILT = orjson.loads((VLLM / "rebuilt_errors.json").read_bytes())


@pytest.mark.parametrize("case", REBUILT, ids=[c["name"] for c in REBUILT])
async def test_vllm_request_model_errors(sim: SimFactory, case: dict[str, Any]) -> None:
    """A body vLLM's own request models reject gets their exact 400; one they accept passes
    on (here to the unknown-model 404, model "m" not being served)."""
    client = await sim()
    resp = await client.post(case["path"], json=case["body"])
    ours = await resp.read()
    if case["status"] == 200:
        assert resp.status == 404
        assert b"Bad Request" not in ours
        return
    assert resp.status == case["status"]
    assert ours == case["response"].encode()


def test_rebuilt_errors_agree_with_the_captures() -> None:
    """The rebuilt errors reproduce the two bodies also captured from a real server."""
    by_name = {c["name"]: c["response"].encode() for c in REBUILT}
    assert by_name["messages_bad_request"] == (
        VLLM / "error_messages_bad_request.json").read_bytes()
    assert by_name["responses_bad_request"] == (
        VLLM / "error_responses_bad_request.json").read_bytes()


# -------------------------------------------------------------------------- llama.cpp

_CACHE_SPLIT = re.compile(rb'"cache_read_input_tokens":(\d+),"input_tokens":(\d+)')
_CACHED = re.compile(rb'"cached_tokens":\d+')
_TIMING = re.compile(rb'"(cache_n|prompt_n|prompt_ms|prompt_per_token_ms|prompt_per_second|'
                     rb'predicted_n|predicted_ms|predicted_per_token_ms|predicted_per_second)":'
                     rb'[0-9.e+-]+')


def _llama_normalize(data: bytes) -> bytes:
    data = _numbered_ids(r"(chatcmpl-|resp_|rs_|msg_)[A-Za-z0-9]{32}")(data)
    data = _TIMES.sub(rb'"\1":0', data)
    data = _CACHE_SPLIT.sub(
        lambda m: b'"cache_read_input_tokens":0,"input_tokens":%d' % (
            int(m.group(1)) + int(m.group(2))), data)
    data = _CACHED.sub(b'"cached_tokens":0', data)
    return _TIMING.sub(rb'"\1":0', data)


LLAMA_CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("messages_thinking_loop.sse", "/v1/messages",
     _messages("tiny-loop.gguf", 60, stream=True)),
    ("messages_thinking_disabled.sse", "/v1/messages",
     _messages("tiny-loop.gguf", 60, stream=True, thinking={"type": "disabled"})),
    ("messages_enable_thinking_false.sse", "/v1/messages",
     _messages("tiny-loop.gguf", 60, stream=True,
               chat_template_kwargs={"enable_thinking": False})),
    ("messages_thinking_loop_nonstream.json", "/v1/messages", _messages("tiny-loop.gguf", 60)),
    ("responses_thinking_loop.sse", "/v1/responses",
     _responses("tiny-loop.gguf", 60, stream=True)),
    ("responses_effort_none.sse", "/v1/responses",
     _responses("tiny-loop.gguf", 60, stream=True, reasoning={"effort": "none"})),
    ("responses_thinking_loop_nonstream.json", "/v1/responses",
     _responses("tiny-loop.gguf", 60)),
]


@pytest.mark.parametrize(("capture", "path", "body"), LLAMA_CASES,
                         ids=[c[0] for c in LLAMA_CASES])
async def test_llamacpp_bytes(sim: SimFactory, trace_file: Path, capture: str, path: str,
                              body: dict[str, Any]) -> None:
    """Each captured llama-server answer comes back byte for byte, up to fresh draws,
    its prompt cache and its timings."""
    client = await _node(sim, trace_file, "tiny-loop.gguf", dialect="llamacpp")
    delta = CAPTURED_PROMPT_TOKENS - await _sim_prompt_tokens(client, "tiny-loop.gguf")
    resp = await client.post(path, json=body)
    ours = await resp.read()
    theirs = (LLAMA / capture).read_bytes()
    assert resp.status == 200
    assert _llama_normalize(ours) == _shift(delta)(_llama_normalize(theirs))
    wanted = _headers(LLAMA / f"{capture}.headers.txt")
    for name in ("server", "content-type", "x-accel-buffering", "access-control-allow-origin"):
        assert resp.headers.get(name) == wanted.get(name), name


def test_llamacpp_ignores_thinking_disabled() -> None:
    """The capture itself: thinking.disabled gave the same loop as no thinking field."""
    def strip(data: bytes) -> bytes:
        return re.sub(rb'"id":"[^"]*"', b"", data)

    assert strip((LLAMA / "messages_thinking_disabled.sse").read_bytes()) == strip(
        (LLAMA / "messages_thinking_loop.sse").read_bytes())
