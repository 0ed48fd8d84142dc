"""The simulator against the bytes of a real vLLM 0.32.0 (copies in tests/data/captures)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.simulator.conftest import SimFactory, hello, normalize

CAPTURES = Path(__file__).parent.parent / "data" / "captures" / "vllm-0.32.0"
RAW_PROMPT = "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
OFF = {"chat_template_kwargs": {"enable_thinking": False}}
USAGE = {"include_usage": True}

CASES: list[tuple[str, str, dict[str, Any]]] = [
    (
        "chat_thinking_loop_usage.sse",
        "/v1/chat/completions",
        hello(max_tokens=48, stream=True, stream_options=USAGE),
    ),
    (
        "chat_thinking_loop_continuous_usage.sse",
        "/v1/chat/completions",
        hello(
            max_tokens=48,
            stream=True,
            stream_options={"include_usage": True, "continuous_usage_stats": True},
        ),
    ),
    ("chat_thinking_loop_nonstream.json", "/v1/chat/completions", hello(max_tokens=48)),
    (
        "chat_thinking_off_answer.sse",
        "/v1/chat/completions",
        hello(model="sim-leaky", max_tokens=48, stream=True, stream_options=USAGE, **OFF),
    ),
    (
        "chat_thinking_off_nonstream.json",
        "/v1/chat/completions",
        hello(model="sim-leaky", max_tokens=48, **OFF),
    ),
    (
        "chat_thinking_token_budget_20.sse",
        "/v1/chat/completions",
        hello(max_tokens=100, stream=True, thinking_token_budget=20),
    ),
    (
        "chat_vllm_repetition_detection.sse",
        "/v1/chat/completions",
        hello(
            max_tokens=500,
            stream=True,
            repetition_detection={"max_pattern_size": 64, "min_pattern_size": 4, "min_count": 3},
        ),
    ),
    ("chat_n2.sse", "/v1/chat/completions", hello(max_tokens=12, stream=True, n=2)),
    (
        "completions_raw_think_tags.sse",
        "/v1/completions",
        {
            "model": "tiny-qwen",
            "prompt": RAW_PROMPT,
            "max_tokens": 30,
            "stream": True,
            "stream_options": USAGE,
        },
    ),
    ("error_max_tokens_too_large.json", "/v1/chat/completions", hello(max_tokens=100000)),
]


@pytest.mark.parametrize(("capture", "path", "body"), CASES, ids=[c[0] for c in CASES])
async def test_same_bytes_as_vllm(sim: SimFactory, capture: str, path: str, body: Any) -> None:
    """The same request gives vLLM's bytes, up to id, created, model and fingerprint."""
    client = await sim()
    resp = await client.post(path, json=body)
    got = await resp.read()
    want = (CAPTURES / capture).read_bytes()
    assert normalize(got) == normalize(want)


async def test_unknown_model_body(sim: SimFactory) -> None:
    """An unknown model gets vLLM's 404 body, listing this node's model names."""
    client = await sim()
    resp = await client.post("/v1/chat/completions", json=hello(model="nope"))
    assert resp.status == 404
    got = await resp.read()
    want = (CAPTURES / "error_unknown_model.json").read_bytes()
    names = orjson.loads(await (await client.get("/v1/models")).read())["data"]
    aliases = ", ".join(m["id"] for m in names)
    assert "tiny-qwen" in aliases
    assert "sim-loop" in aliases
    assert got == want.replace(b"Valid aliases: tiny-qwen.", f"Valid aliases: {aliases}.".encode())


async def test_stream_headers_and_start_like_vllm(sim: SimFactory) -> None:
    """Streaming headers and the first events match response_headers_stream.txt."""
    client = await sim()
    resp = await client.post("/v1/chat/completions", json=hello(max_tokens=3, stream=True))
    text = (CAPTURES / "response_headers_stream.txt").read_bytes()
    head, _, captured_body = text.partition(b"\r\n\r\n")
    wanted = {
        line.split(b": ", 1)[0].decode().lower(): line.split(b": ", 1)[1].decode()
        for line in head.splitlines()[1:]
    }
    assert resp.status == 200
    for name in ("server", "content-type", "vary", "transfer-encoding"):
        assert resp.headers[name] == wanted[name], name
    assert "content-length" not in resp.headers
    body = await resp.read()
    # The capture file stops after the finish chunk's line; the stream then says [DONE].
    assert normalize(body) == normalize(captured_body.rstrip(b"\n") + b"\n\ndata: [DONE]\n\n")
