"""Hypothesis fuzzing of the pure parsers: SSE decoder, HTTP/1.1 response reader, stream
model, aggregator, watched attempt and reissue-body rewriting raise only their documented
exceptions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import CAPTURES
from tests.reliability.properties import (
    check_aggregator,
    check_attempt,
    check_http1,
    check_reissue,
    check_sse,
    check_stream_model,
)

FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
ROUTES = st.sampled_from(["chat", "completions"])
CAPTURED = [p.read_bytes() for p in sorted(Path(CAPTURES).glob("*.sse"))]

# Any JSON value, up to a few levels deep; "weird" scalars included.
INT64 = st.integers(-(2**63), 2**63 - 1)
SCALARS = (st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20))
JSON = st.recursive(SCALARS, lambda kids: st.lists(kids, max_size=4)
                    | st.dictionaries(st.text(max_size=8), kids, max_size=4), max_leaves=12)


def nested(depth: int, leaf: Any = 0) -> Any:
    """A value nested ``depth`` levels deep, alternating lists and objects."""
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def sse_bytes() -> st.SearchStrategy[bytes]:
    """Captured vLLM streams, cut and mutated, or raw noise with SSE-ish separators."""
    line = st.sampled_from([b"data: ", b"data:", b": c", b"event: x", b"\r", b"\n", b"\r\n",
                            b"\n\n", b"[DONE]", b'{"choices":[', b"\xff\xfe", b"\xe2\x82"])
    noise = st.lists(line | st.binary(max_size=30), max_size=40).map(b"".join)
    captured = st.tuples(st.sampled_from(CAPTURED), st.integers(0, 50_000),
                         st.integers(0, 50_000), st.binary(max_size=8)).map(
        lambda t: t[0][: t[1]] + t[3] + t[0][t[1] + t[2]:] if t[2] else t[0][: t[1]])
    return noise | captured | st.binary(max_size=300)


def http1_bytes() -> st.SearchStrategy[bytes]:
    """Responses as a streaming upstream writes them (a head, chunks of captured events),
    cut and mutated, or raw noise made of HTTP-ish pieces."""
    def wire(events: bytes, framing: str) -> bytes:
        parts = [e + b"\n\n" for e in events.split(b"\n\n") if e]
        if framing == "chunked":
            body = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in parts)
            return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body + b"0\r\n\r\n"
        body = b"".join(parts)
        if framing == "length":
            return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
        return b"HTTP/1.0 200 OK\r\n\r\n" + body
    whole = st.builds(wire, st.sampled_from(CAPTURED), st.sampled_from(["chunked", "length",
                                                                         "close"]))
    mutated = st.tuples(whole, st.integers(0, 50_000), st.integers(0, 50_000),
                        st.binary(max_size=8)).map(
        lambda t: t[0][: t[1]] + t[3] + t[0][t[1] + t[2]:] if t[2] else t[0][: t[1]])
    token = st.sampled_from([b"HTTP/1.1 ", b"200 OK", b"100 Continue", b"\r\n", b"\r\n\r\n",
                             b"Transfer-Encoding: chunked", b"Content-Length: 5", b"0\r\n",
                             b"5\r\n", b"ffffffff\r\n", b";x=y", b"Connection: close", b":"])
    noise = st.lists(token | st.binary(max_size=20), max_size=30).map(b"".join)
    return whole | mutated | noise


def chunk_like(route: str) -> st.SearchStrategy[dict[str, Any]]:
    """Chunk-shaped objects where any field may hold any JSON value."""
    delta = st.fixed_dictionaries({}, optional={
        "role": JSON, "content": JSON | st.text(), "reasoning": JSON | st.text(),
        "reasoning_content": JSON, "tool_calls": JSON | st.lists(st.fixed_dictionaries(
            {}, optional={"index": JSON | st.integers(-3, 3), "id": JSON, "type": JSON,
                          "function": JSON | st.fixed_dictionaries(
                              {}, optional={"name": JSON, "arguments": JSON})}), max_size=3)})
    choice = st.fixed_dictionaries({}, optional={
        "index": JSON | st.integers(-2, 3), "delta": JSON | delta, "text": JSON | st.text(),
        "logprobs": JSON, "finish_reason": JSON, "stop_reason": JSON, "token_ids": JSON})
    usage = st.fixed_dictionaries({}, optional={
        "prompt_tokens": JSON | INT64, "completion_tokens": JSON | INT64,
        "total_tokens": JSON, "completion_tokens_details": JSON | st.fixed_dictionaries(
            {}, optional={"reasoning_tokens": JSON | INT64})})
    return st.fixed_dictionaries({}, optional={
        "id": JSON, "object": JSON, "created": JSON, "model": JSON,
        "choices": JSON | st.lists(JSON | choice, max_size=3), "usage": JSON | usage,
        "error": st.none() | JSON, "system_fingerprint": JSON, "prompt_token_ids": JSON,
        "kv_transfer_params": JSON})


@FUZZ
@given(http1_bytes(), st.lists(st.integers(0, 60_000), max_size=12))
def test_http1_reader_is_total_and_split_independent(data: bytes, cuts: list[int]) -> None:
    """The HTTP/1.1 reader raises only ProtocolError and ignores how input is split."""
    check_http1(data, cuts)


@FUZZ
@given(sse_bytes(), st.lists(st.integers(0, 60_000), max_size=12), st.integers(16, 4096))
def test_sse_decoder_is_total_and_lossless(data: bytes, cuts: list[int], limit: int) -> None:
    """The decoder raises only SSEError, loses no byte and ignores how input is split."""
    check_sse(data, cuts)
    check_sse(data, cuts, max_event_bytes=limit)


@FUZZ
@given(sse_bytes(), st.integers(1, 64))
def test_sse_huge_line(prefix: bytes, kib: int) -> None:
    """A line far larger than the event limit is an SSEError, never a hang or a crash."""
    assert check_sse(prefix + b"data: " + b"x" * (kib * 8192), [7, 5000], 4096) == -1


@FUZZ
@given(ROUTES, st.lists(st.binary(max_size=200) | st.sampled_from(
    [b"[DONE]", b"{}", b"[]", b"null", b'{"choices":null}', b'{"error":1}', b'\xff',
     b'{"choices":[{"index":"a"}]}', b'{"choices":[1]}', b'"x"', b"1e999"]), max_size=10),
    st.booleans())
def test_stream_model_raises_only_malformed_chunk_on_bytes(route: str, payloads: list[bytes],
                                                           thinking: bool) -> None:
    """Arbitrary payload bytes: only MalformedChunk escapes StreamModel.feed."""
    check_stream_model(route, payloads, thinking)  # type: ignore[arg-type]


@FUZZ
@given(ROUTES.flatmap(lambda r: st.tuples(st.just(r), st.lists(chunk_like(r), max_size=6))))
def test_stream_model_unexpected_types_in_every_field(case: tuple[str, list[Any]]) -> None:
    """Chunk-shaped objects with any type in any field: only MalformedChunk escapes."""
    route, chunks = case
    check_stream_model(route, [orjson.dumps(c) for c in chunks])  # type: ignore[arg-type]


@FUZZ
@given(ROUTES.flatmap(lambda r: st.tuples(st.just(r), st.lists(chunk_like(r), max_size=6))))
def test_aggregator_folds_any_accepted_chunk(case: tuple[str, list[Any]]) -> None:
    """Any chunk the stream model accepts folds in; the body is always a JSON object."""
    route, chunks = case
    check_aggregator(route, chunks)  # type: ignore[arg-type]


@FUZZ
@given(ROUTES, st.lists(sse_bytes(), max_size=4), st.integers(0, 1), st.booleans())
def test_attempt_raises_only_protocol_errors_on_bytes(route: str, chunks: list[bytes],
                                                      number: int, aggregate: bool) -> None:
    """A watched attempt over arbitrary upstream bytes raises only UpstreamProtocolError."""
    check_attempt(route, chunks, number=number, aggregate=aggregate)  # type: ignore[arg-type]


@FUZZ
@given(ROUTES.flatmap(lambda r: st.tuples(st.just(r), st.lists(chunk_like(r), max_size=6))),
       st.integers(0, 1), st.booleans())
def test_attempt_unexpected_types_in_every_field(case: tuple[str, list[Any]], number: int,
                                                 aggregate: bool) -> None:
    """Well-framed SSE carrying chunks with any field of any type: only protocol errors."""
    route, chunks = case
    data = [b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks]
    check_attempt(route, data, number=number, aggregate=aggregate)  # type: ignore[arg-type]


BODIES = st.fixed_dictionaries({}, optional={
    "model": JSON | st.sampled_from(["Qwen/Qwen3-8B", "deepseek-r1", "gpt-oss", "x"]),
    "messages": JSON | st.lists(st.fixed_dictionaries({"role": JSON, "content": JSON}),
                                max_size=3),
    "prompt": JSON, "n": JSON | st.integers(-2, 5), "stream": JSON, "stream_options": JSON,
    "chat_template_kwargs": JSON | st.dictionaries(
        st.sampled_from(["enable_thinking", "thinking", "other"]), JSON, max_size=3),
    "reasoning_effort": JSON, "think": JSON, "tools": JSON, "response_format": JSON,
    "temperature": JSON, "max_tokens": JSON, "logprobs": JSON,
    "thinking_token_budget": JSON, "continue_final_message": JSON,
}) | st.dictionaries(st.text(max_size=10), JSON, max_size=6)


@FUZZ
@given(BODIES, st.booleans(), st.integers(1, 4), st.none() | st.text(min_size=1, max_size=10),
       st.text(max_size=200))
def test_reissue_bodies_change_only_documented_fields(body: dict[str, Any], stream: bool,
                                                      open_choices: int, fallback: str | None,
                                                      reasoning: str) -> None:
    """no-think, fallback and salvage bodies differ from the client's only where documented."""
    check_reissue(body, client_stream=stream, open_choices=open_choices, fallback=fallback,
                  reasoning=reasoning)


@FUZZ
@given(st.integers(0, 1100), BODIES)
def test_reissue_deeply_nested_bodies(depth: int, body: dict[str, Any]) -> None:
    """Deep nesting in any field: no exception from the rewriting (or a documented skip)."""
    body = {**body, "messages": [{"role": "user", "content": nested(depth)}],
            "tools": nested(depth // 2)}
    check_reissue(body, client_stream=False, open_choices=1, fallback=None, reasoning="r")
