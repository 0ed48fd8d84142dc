"""The proxy's routes, watched and relayed: with nothing firing, the sidecar is invisible
(bytes, statuses and headers as vLLM's)."""

from __future__ import annotations

import re

import aiohttp
import orjson
import pytest
from openai import AsyncOpenAI

from tests.stack import StackFactory

_VARIABLE = re.compile(rb'"(id|created|system_fingerprint)":("[^"]*"|\d+)')


def normalize(body: bytes) -> bytes:
    """Two requests differ only in id, created and fingerprint values."""
    return _VARIABLE.sub(rb'"\1":"*"', body)


async def fetch(method: str, url: str, **kw: object) -> tuple[int, dict[str, str], bytes]:
    async with aiohttp.ClientSession() as s, s.request(method, url, **kw) as r:  # type: ignore[arg-type]
        return r.status, dict(r.headers), await r.read()


@pytest.mark.parametrize(("method", "path", "body"), [
    ("GET", "/v1/models", None),
    ("GET", "/health", None),
    ("GET", "/metrics", None),
    ("POST", "/tokenize", {"model": "sim-healthy", "prompt": "hello there"}),
    ("POST", "/v1/embeddings", {"model": "sim-healthy", "input": "hello"}),
    ("GET", "/no/such/path", None),
])
async def test_passthrough_byte_identical(make_stack: StackFactory, method: str, path: str,
                                          body: object) -> None:
    """Unwatched routes relay status and body byte for byte."""
    stack = await make_stack()
    kw = {"json": body} if body is not None else {}
    direct = await fetch(method, stack.sim_url + path, **kw)
    proxied = await fetch(method, stack.url + path, **kw)
    assert proxied[0] == direct[0]
    if path == "/metrics":  # the node's counters moved between the two calls
        assert proxied[2].splitlines()[0] == direct[2].splitlines()[0]
    elif path in ("/v1/models", "/v1/embeddings"):  # vLLM mints fresh ids per call
        assert normalize(proxied[2]) == normalize(direct[2])
    else:
        assert proxied[2] == direct[2]
    assert proxied[1].get("Content-Type") == direct[1].get("Content-Type")


async def test_hop_by_hop_headers_stripped(make_stack: StackFactory) -> None:
    """Connection-scoped and Proxy-* headers never cross the proxy."""
    stack = await make_stack()
    status, headers, _ = await fetch("GET", stack.url + "/v1/models",
                                     headers={"Proxy-Authorization": "Basic x", "TE": "trailers"})
    assert status == 200
    assert "Proxy-Authorization" not in headers


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions"])
async def test_watched_identical_when_nothing_fires(make_stack: StackFactory, stream: bool,
                                                    route: str) -> None:
    """A healthy request through the sidecar returns vLLM's own bytes (ids aside)."""
    stack = await make_stack()
    body: dict[str, object] = {"model": "sim-healthy", "stream": stream, "max_tokens": 600}
    if route.endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": "Say OK"}]
    else:
        body["prompt"] = "Say OK"
    if stream:
        body["stream_options"] = {"include_usage": True}
    direct = await fetch("POST", stack.sim_url + route, json=body)
    proxied = await fetch("POST", stack.url + route, json=body)
    assert proxied[0] == direct[0] == 200
    assert normalize(proxied[2]) == normalize(direct[2])
    assert proxied[1]["Content-Type"] == direct[1]["Content-Type"]
    assert stack.metric("runaway_sidecar_runaways_total") == 0


async def test_openai_sdk_streaming_and_not(make_stack: StackFactory) -> None:
    """The official SDK reads the same answer through the sidecar, streaming or not."""
    stack = await make_stack()
    client = AsyncOpenAI(base_url=stack.url + "/v1", api_key="k", max_retries=0)
    whole = await client.chat.completions.create(
        model="sim-healthy", messages=[{"role": "user", "content": "Say OK"}], max_tokens=4000)
    stream = await client.chat.completions.create(
        model="sim-healthy", messages=[{"role": "user", "content": "Say OK"}], max_tokens=4000,
        stream=True, stream_options={"include_usage": True})
    content, usage = [], None
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            content.append(chunk.choices[0].delta.content)
        usage = chunk.usage or usage
    assert whole.choices[0].message.content == "".join(content)
    assert whole.choices[0].finish_reason == "stop"
    assert usage is not None
    assert whole.usage is not None
    assert usage.completion_tokens == whole.usage.completion_tokens
    await client.close()


async def test_nonstream_upstream_error_relayed(make_stack: StackFactory) -> None:
    """vLLM's own 4xx (unknown model) reaches the client unchanged."""
    stack = await make_stack()
    body = {"model": "nope", "messages": [{"role": "user", "content": "x"}]}
    direct = await fetch("POST", stack.sim_url + "/v1/chat/completions", json=body)
    proxied = await fetch("POST", stack.url + "/v1/chat/completions", json=body)
    assert proxied[0] == direct[0] == 404
    assert proxied[2] == direct[2]


async def test_non_json_body_passes_through(make_stack: StackFactory) -> None:
    """A body that is not JSON goes to vLLM untouched, so vLLM gives its own answer."""
    stack = await make_stack()
    direct = await fetch("POST", stack.sim_url + "/v1/chat/completions", data=b"{nope",
                         headers={"Content-Type": "application/json"})
    proxied = await fetch("POST", stack.url + "/v1/chat/completions", data=b"{nope",
                          headers={"Content-Type": "application/json"})
    assert proxied[0] == direct[0]
    assert proxied[2] == direct[2]


async def test_body_limit(make_stack: StackFactory) -> None:
    """A body over ``max_body_bytes`` gets a 413 JSON error."""
    stack = await make_stack(max_body_bytes=2048)
    status, _, body = await fetch("POST", stack.url + "/v1/chat/completions",
                                  data=b'{"x":"' + b"a" * 5000 + b'"}')
    assert status == 413
    assert orjson.loads(body)["error"]["code"] == 413
