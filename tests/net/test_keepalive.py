"""Upstream keep-alive: idle connections close on a timer, and a request written on a reused
connection that the upstream closes instead of answering is sent once more on a new one
(both upstream clients: the watched routes' pool and aiohttp's for pass-through routes)."""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import AsyncIterator, Callable
from typing import Literal

import aiohttp
import orjson
import pytest

from sidecar.codecs.http1 import Truncated
from sidecar.net.relay import PASSTHROUGH_RESEND_BYTES
from sidecar.net.upstream import UpstreamPool
from tests.reliability.harness import start_sidecar

Ending = Literal["fin", "reset", "partial"]

_CHUNKS = (
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"role":"assistant","content":"ok"},'
    b'"finish_reason":null}]}\n\n'
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


class KeepAliveUpstream:
    """An HTTP/1.1 server on 127.0.0.1 that keeps each connection open between requests. It
    answers the first ``answers`` requests on a connection (``None``: all of them) and meets
    the next one by ending the connection instead: ``fin`` closes it, ``reset`` resets it,
    ``partial`` sends the start of a status line first. Chat completions get an event
    stream; any other path a JSON echo of the method, path and body length."""

    def __init__(self, answers: int | None = 1, ending: Ending = "fin") -> None:
        self.answers, self.ending = answers, ending
        self.opened = 0
        self.open = 0
        self.answered = 0
        self.bodies: list[bytes] = []
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.opened += 1
        self.open += 1
        self._writers.add(writer)
        served = 0
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return  # the sidecar closed the connection
                body = await _body(reader, head)
                if self.answers is not None and served >= self.answers:
                    if self.ending == "partial":
                        writer.write(b"HTTP/1.1 2")
                        await writer.drain()
                    if self.ending == "reset":
                        writer.transport.abort()
                    return
                served += 1
                self.answered += 1
                self.bodies.append(body)
                writer.write(_answer(head, body))
                await writer.drain()
        finally:
            self.open -= 1
            self._writers.discard(writer)
            writer.close()


def _answer(head: bytes, body: bytes) -> bytes:
    method, path, _ = head.split(b"\r\n", 1)[0].split(b" ", 2)
    if path == b"/v1/chat/completions":
        return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
                + f"{len(_CHUNKS):x}\r\n".encode() + _CHUNKS + b"\r\n0\r\n\r\n")
    echo = orjson.dumps({"method": method.decode(), "path": path.decode(), "bytes": len(body)})
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(echo)}\r\n\r\n".encode() + echo)


async def _body(reader: asyncio.StreamReader, head: bytes) -> bytes:
    lines = head.decode("latin-1").lower().split("\r\n")
    for line in lines:
        if line.startswith("content-length:"):
            return await reader.readexactly(int(line.split(":", 1)[1]))
    if "transfer-encoding: chunked" in lines:
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            parts.append((await reader.readexactly(size + 2))[:-2])
            if size == 0:
                return b"".join(parts)
    return b""


@pytest.fixture
async def upstreams() -> AsyncIterator[Callable[..., object]]:
    """Factory of started :class:`KeepAliveUpstream` servers, closed after the test."""
    made: list[KeepAliveUpstream] = []

    async def make(answers: int | None = 1, ending: Ending = "fin") -> KeepAliveUpstream:
        up = KeepAliveUpstream(answers, ending)
        await up.start()
        made.append(up)
        return up

    yield make
    for up in made:
        await up.close()


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> float:
    """Wait until ``condition()`` holds; return the seconds it took."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, "condition not met in time"
        await asyncio.sleep(0.005)
    return time.monotonic() - started


# -- the watched requests' pool -------------------------------------------------------------


@pytest.mark.parametrize("ending", ["fin", "reset"])
async def test_pool_sends_again_when_a_reused_connection_closes_unanswered(
        upstreams: Callable[..., object], ending: Ending) -> None:
    """An upstream that closes (or resets) each kept-alive connection instead of answering
    its second request: every request still gets its response, each one after the first
    was sent once more on a new connection, and each resend is reported."""
    up = await upstreams(answers=1, ending=ending)
    assert isinstance(up, KeepAliveUpstream)
    retries: list[int] = []
    pool = UpstreamPool(up.url, 5.0, 4.0, on_retry=lambda: retries.append(1))
    try:
        for n in range(10):
            async with await pool.post("/v1/chat/completions", [], b'{"n":%d}' % n) as resp:
                assert resp.status == 200
                assert await resp.read() == _CHUNKS
    finally:
        pool.close()
    assert len(retries) == 9
    assert up.answered == 10
    assert up.bodies == [b'{"n":%d}' % n for n in range(10)]
    assert up.opened == 10


async def test_pool_never_sends_twice_on_a_new_connection(
        upstreams: Callable[..., object]) -> None:
    """A new connection that closes unanswered is the upstream failing, not an idle close:
    the request fails with ``Truncated`` and is not sent again."""
    up = await upstreams(answers=0)
    assert isinstance(up, KeepAliveUpstream)
    retries: list[int] = []
    pool = UpstreamPool(up.url, 5.0, 4.0, on_retry=lambda: retries.append(1))
    with pytest.raises(Truncated, match="before answering"):
        await pool.post("/v1/chat/completions", [], b"{}")
    pool.close()
    assert (up.opened, retries) == (1, [])


async def test_pool_never_sends_twice_once_an_answer_began(
        upstreams: Callable[..., object]) -> None:
    """A reused connection that closes after the first bytes of a status line: the upstream
    had read the request, so it fails and is not sent again."""
    up = await upstreams(answers=1, ending="partial")
    assert isinstance(up, KeepAliveUpstream)
    retries: list[int] = []
    pool = UpstreamPool(up.url, 5.0, 4.0, on_retry=lambda: retries.append(1))
    async with await pool.post("/v1/chat/completions", [], b"{}") as resp:
        await resp.read()
    with pytest.raises(Truncated):
        await pool.post("/v1/chat/completions", [], b"{}")
    pool.close()
    assert (up.opened, retries) == (1, [])


async def test_pool_closes_idle_connections_on_a_timer(
        upstreams: Callable[..., object]) -> None:
    """With no further request, an idle connection is closed once its keep-alive has passed
    (not at the next use of the pool), and not before."""
    up = await upstreams(answers=None)
    assert isinstance(up, KeepAliveUpstream)
    pool = UpstreamPool(up.url, 5.0, 0.2)
    try:
        for _ in range(2):  # the second request reuses the first one's connection
            async with await pool.post("/v1/chat/completions", [], b"{}") as resp:
                await resp.read()
        assert (up.opened, up.open, pool.idle) == (1, 1, 1)
        took = await until(lambda: up.open == 0)
    finally:
        pool.close()
    assert 0.15 <= took < 2.0
    assert pool.idle == 0


async def test_pool_keeps_nothing_with_keepalive_zero(upstreams: Callable[..., object]) -> None:
    """``keepalive`` 0: a connection is closed as soon as its response was read."""
    up = await upstreams(answers=None)
    assert isinstance(up, KeepAliveUpstream)
    pool = UpstreamPool(up.url, 5.0, 0.0)
    for _ in range(2):
        async with await pool.post("/v1/chat/completions", [], b"{}") as resp:
            await resp.read()
        await until(lambda: up.open == 0)
    assert (up.opened, pool.idle) == (2, 0)


# -- through the sidecar ---------------------------------------------------------------------


def _retries(registry: object, pool: str) -> float:
    from prometheus_client import CollectorRegistry

    assert isinstance(registry, CollectorRegistry)
    return registry.get_sample_value("runaway_sidecar_upstream_retries_total",
                                     {"pool": pool}) or 0.0


@pytest.mark.parametrize("ending", ["fin", "reset"])
async def test_sidecar_answers_every_request_when_kept_alive_connections_close(
        upstreams: Callable[..., object], ending: Ending) -> None:
    """The keep-alive race made deterministic: an upstream that ends each kept-alive
    connection instead of answering its second request. Through the sidecar every watched
    stream and every pass-through request (bodiless GET, POST with a body) succeeds, the
    resends are counted per pool, and no upstream error is counted. (A watched resend's new
    connection is kept, and meets the same end at the next request; a pass-through resend's
    connection is not kept, so the next pass-through request opens a new one.)"""
    up = await upstreams(answers=1, ending=ending)
    assert isinstance(up, KeepAliveUpstream)
    server, registry = await start_sidecar(up.url)
    url = str(server.make_url("")).rstrip("/")
    chat = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    try:
        async with aiohttp.ClientSession() as client:
            for _ in range(20):
                async with client.post(url + "/v1/chat/completions", json=chat) as resp:
                    assert resp.status == 200
                    assert (await resp.read()).endswith(b"data: [DONE]\n\n")
            for n in range(20):
                if n % 2:
                    async with client.post(url + "/tokenize", data=b"x" * n) as resp:
                        assert resp.status == 200
                        assert orjson.loads(await resp.read())["bytes"] == n
                else:
                    async with client.get(url + "/v1/models") as resp:
                        assert resp.status == 200
                        assert orjson.loads(await resp.read())["method"] == "GET"
    finally:
        await server.close()
    assert _retries(registry, "watched") == 19
    assert _retries(registry, "passthrough") == 10
    assert up.answered == 40
    errors = [s for m in registry.collect() if m.name == "runaway_sidecar_upstream_errors"
              for s in m.samples if s.name.endswith("_total")]
    assert errors
    assert sum(s.value for s in errors) == 0


@pytest.mark.parametrize("size", [None, PASSTHROUGH_RESEND_BYTES + 1],
                         ids=["unknown-length", "over-the-cap"])
async def test_sidecar_never_sends_a_streamed_body_twice(
        upstreams: Callable[..., object], size: int | None) -> None:
    """A pass-through body the sidecar streams (length unknown, or above
    ``PASSTHROUGH_RESEND_BYTES``) is not held, so it is never sent again: when its reused
    connection closes unanswered the client gets a 502, and no resend is counted."""
    up = await upstreams(answers=1)
    assert isinstance(up, KeepAliveUpstream)
    server, registry = await start_sidecar(up.url)
    url = str(server.make_url("")).rstrip("/") + "/tokenize"

    async def chunks() -> AsyncIterator[bytes]:
        yield b"a" * 100

    try:
        async with aiohttp.ClientSession() as client:
            statuses = []
            for _ in range(2):
                data = chunks() if size is None else io.BytesIO(b"b" * size)
                async with client.post(url, data=data) as resp:
                    statuses.append(resp.status)
                    await resp.read()
    finally:
        await server.close()
    assert statuses == [200, 502]
    assert _retries(registry, "passthrough") == 0
    assert up.answered == 1


async def test_sidecar_closes_idle_upstream_connections_with_no_traffic(
        upstreams: Callable[..., object]) -> None:
    """After a watched and a pass-through request, both upstream connections close once
    ``upstream_keepalive_seconds`` has passed with no further request (an idle node keeps
    no upstream connection or file descriptor open)."""
    up = await upstreams(answers=None)
    assert isinstance(up, KeepAliveUpstream)
    server, _ = await start_sidecar(up.url, upstream_keepalive_seconds=0.3)
    url = str(server.make_url("")).rstrip("/")
    chat = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    try:
        async with aiohttp.ClientSession() as client:
            async with client.post(url + "/v1/chat/completions", json=chat) as resp:
                assert (await resp.read()).endswith(b"data: [DONE]\n\n")
            async with client.get(url + "/v1/models") as resp:
                assert resp.status == 200
            assert (up.opened, up.open) == (2, 2)
            took = await until(lambda: up.open == 0)
    finally:
        await server.close()
    # aiohttp's timer (pass-through) closes what has idled a keep-alive at its next tick,
    # so at most two keep-alives pass.
    assert 0.2 <= took < 2.0
