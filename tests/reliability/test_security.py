"""Security: no secret or prompt in logs or metrics, connection-scoped headers stripped,
no request can steer the sidecar to another host, loopback metrics, inbound API key."""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Iterator

import aiohttp
import orjson
import pytest
import structlog

from sidecar.config import Config, load_config, parse_host_port
from sidecar.obs.logs import configure_logging
from tests.reliability.harness import RawUpstream, Reply, start_sidecar
from tests.stack import StackFactory

SECRET = "sk-canary-7f3a9c1e5b"  # noqa: S105 - a canary, not a credential
PROMPT = "canary prompt about the Zanzibar payroll ledger"
OK = Reply(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")


@pytest.fixture
def log_output() -> Iterator[io.StringIO]:
    """All log output (structlog and stdlib, debug level) captured, undone after."""
    root = logging.getLogger()
    level, before = root.level, list(root.handlers)
    stream = io.StringIO()
    configure_logging("json", "debug", stream)
    yield stream
    structlog.reset_defaults()
    for handler in [h for h in root.handlers if h not in before]:
        root.removeHandler(handler)
    root.setLevel(level)


async def test_secrets_and_prompts_never_logged(make_stack: StackFactory,
                                                log_output: io.StringIO) -> None:
    """Authorization, API keys and prompts stay out of every log line and metric, across
    healthy, runaway, fault, error and pass-through requests."""
    stack = await make_stack(detectors={"stall_seconds": 0.3})
    auth = {"Authorization": f"Bearer {SECRET}", "X-Api-Key": SECRET, "Cookie": SECRET}
    body = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 300}
    async with aiohttp.ClientSession(headers=auth) as s:
        for model, stream, fault in [("sim-healthy", True, None), ("sim-loop", True, None),
                                     ("sim-loop", False, None), ("sim-healthy", True,
                                                                 "reset-mid-stream"),
                                     ("sim-healthy", False, "http-500"),
                                     ("nope", False, None)]:
            headers = {"X-Sim-Fault": fault} if fault else {}
            async with s.post(stack.url + "/v1/chat/completions", headers=headers,
                              json={**body, "model": model, "stream": stream}) as r:
                await r.read()
        async with s.post(stack.url + f"/tokenize?api_key={SECRET}",
                          json={"model": "sim-healthy", "prompt": PROMPT}) as r:
            await r.read()
        async with s.post(stack.url + "/v1/completions", data=PROMPT.encode()) as r:
            await r.read()  # non-JSON body: passed through
    logged = log_output.getvalue()
    assert '"event": "access"' in logged or '"event":"access"' in logged
    assert logged.count("access") >= 8
    for text in (SECRET, PROMPT, "Zanzibar"):
        assert text not in logged
        assert text not in stack.sidecar_metrics_text()


async def test_hop_by_hop_and_proxy_headers_stripped_both_ways() -> None:
    """Connection-scoped and Proxy-* headers cross the sidecar in neither direction."""
    upstream = RawUpstream(default=Reply(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close, X-Up-Hop\r\n"
        b"X-Up-Hop: 1\r\nKeep-Alive: timeout=5\r\nProxy-Authenticate: Basic\r\n"
        b"Proxy-Foo: 1\r\nX-Kept: 1\r\n\r\nok"))
    await upstream.start()
    sidecar, _ = await start_sidecar(upstream.url)
    sent = {"Connection": "keep-alive, X-Hop", "X-Hop": "1", "Keep-Alive": "timeout=5",
            "Proxy-Authorization": f"Basic {SECRET}", "Proxy-Connection": "keep-alive",
            "Proxy-Whatever": "1", "TE": "trailers", "Upgrade": "h2c", "X-Kept": "1"}
    async with aiohttp.ClientSession() as s, s.get(sidecar.make_url("/v1/models"),
                                                   headers=sent) as r:
        got = r.headers
        await r.read()
    await sidecar.close()
    await upstream.close()
    names = {line.split(b":")[0].lower() for line in upstream.requests[0].split(b"\r\n")[1:]}
    for name in (b"x-hop", b"keep-alive", b"proxy-authorization", b"proxy-connection",
                 b"proxy-whatever", b"te", b"upgrade"):
        assert name not in names
    assert b"x-kept" in names
    for name in ("X-Up-Hop", "Keep-Alive", "Proxy-Authenticate", "Proxy-Foo"):
        assert name not in got
    assert got["X-Kept"] == "1"


@pytest.mark.parametrize("target", [
    "http://{decoy}/v1/models", "//{decoy}/v1/models", "/@{decoy}/v1/models",
    "{decoy}", "/v1/models/../../{decoy}/x", "/%2F%2F{decoy}/x", "*",
])
async def test_request_target_cannot_reach_another_host(target: str) -> None:
    """Absolute-form, scheme-relative, userinfo-like and authority-form targets reach the
    configured upstream or nothing, never the decoy."""
    upstream, decoy = RawUpstream(default=OK), RawUpstream(default=OK)
    await upstream.start()
    await decoy.start()
    sidecar, _ = await start_sidecar(upstream.url)
    decoy_host = decoy.url.removeprefix("http://")
    upstream_host = upstream.url.removeprefix("http://").encode()
    method = "CONNECT" if target == "{decoy}" else "GET"
    line = f"{method} {target.format(decoy=decoy_host)} HTTP/1.1\r\n"
    reader, writer = await asyncio.open_connection("127.0.0.1", sidecar.port)
    writer.write(line.encode() + f"Host: {decoy_host}\r\nX-Forwarded-Host: {decoy_host}\r\n"
                 "Connection: close\r\n\r\n".encode())
    async with asyncio.timeout(5):
        reply = await reader.read(-1)
    writer.close()
    await sidecar.close()
    await upstream.close()
    await decoy.close()
    assert decoy.opened == 0
    assert reply.startswith((b"HTTP/1.1 200", b"HTTP/1.1 400", b"HTTP/1.0 400",
                             b"HTTP/1.1 404"))
    for head in upstream.requests:  # whatever reached the upstream was addressed to it
        host = [h for h in head.split(b"\r\n") if h.lower().startswith(b"host:")]
        assert host == [b"Host: " + upstream_host]


async def test_host_header_and_body_do_not_change_upstream() -> None:
    """A Host header and body fields naming another host leave the upstream unchanged."""
    upstream, decoy = RawUpstream(default=OK), RawUpstream(default=OK)
    await upstream.start()
    await decoy.start()
    sidecar, _ = await start_sidecar(upstream.url)
    body = {"model": "m", "messages": [], "url": decoy.url, "base_url": decoy.url,
            "upstream": decoy.url}
    async with aiohttp.ClientSession() as s, s.post(
            sidecar.make_url("/v1/chat/completions"), data=orjson.dumps(body),
            headers={"Host": decoy.url[7:], "X-Forwarded-Host": decoy.url[7:],
                     "Forwarded": f"host={decoy.url[7:]}"}) as r:
        await r.read()
    await sidecar.close()
    await upstream.close()
    await decoy.close()
    assert decoy.opened == 0
    assert len(upstream.requests) == 1


def test_metrics_listener_is_loopback_by_default() -> None:
    """With no file, env or flag, /metrics binds 127.0.0.1 only."""
    host, _ = parse_host_port(load_config(env={}).metrics_listen, "metrics_listen")
    assert host == "127.0.0.1"
    assert Config().metrics_listen.startswith("127.0.0.1:")


async def test_inbound_api_key() -> None:
    """Off by default; when set, every route wants "Bearer <key>" and answers 401 else."""
    assert Config().api_key is None
    upstream = RawUpstream(default=OK)
    await upstream.start()
    sidecar, _ = await start_sidecar(upstream.url, api_key=SECRET)
    results = []
    async with aiohttp.ClientSession() as s:
        for path in ("/v1/chat/completions", "/v1/models"):
            for auth in (None, "Bearer wrong", SECRET, f"Bearer {SECRET}x",
                         f"Bearer {SECRET}"):
                headers = {"Authorization": auth} if auth else {}
                async with s.post(sidecar.make_url(path), headers=headers,
                                  data=b"{}") as r:
                    data = await r.read()
                    results.append(r.status)
                    if r.status == 401:
                        assert orjson.loads(data)["error"]["code"] == 401
    await sidecar.close()
    await upstream.close()
    assert results == [401, 401, 401, 401, 200] * 2
    assert len(upstream.requests) == 2
