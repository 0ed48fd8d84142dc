"""The watched requests' upstream connections: keep-alive reuse, the cut, flow control and
the errors a broken upstream causes, against real servers on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from sidecar.codecs.http1 import ProtocolError, Truncated
from sidecar.errors import UpstreamTimeoutError
from sidecar.net.upstream import HIGH_WATER, UpstreamPool
from tests.reliability.harness import (
    SSE_CHUNKED_HEAD,
    RawUpstream,
    Reply,
    chunked,
    start_sidecar,
)

ServerFactory = Callable[..., Awaitable[TestServer]]
#: A self-signed certificate for localhost and 127.0.0.1, valid until 2126, made with
#: ``openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 36500
#: -subj "/CN=runaway-sidecar test upstream"
#: -addext "subjectAltName=DNS:localhost,IP:127.0.0.1"``.
TLS = Path(__file__).parent.parent / "data" / "tls"


class Upstream:
    """An aiohttp server whose ``POST /v1/chat/completions`` streams ``events`` chunks and
    records what it saw: client ports (one per connection), paths, heads and bodies."""

    def __init__(self, events: int = 3, size: int = 20, forever: bool = False) -> None:
        self.events, self.size, self.forever = events, size, forever
        self.ports: list[int] = []
        self.seen: list[tuple[str, dict[str, str], bytes]] = []
        self.client_gone = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        self.ports.append(peer[1] if peer else -1)
        self.seen.append((request.path_qs, dict(request.headers), await request.read()))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            i = 0
            while self.forever or i < self.events:
                await resp.write(b"data: " + str(i).encode() * self.size + b"\n\n")
                i += 1
                if self.forever:
                    await asyncio.sleep(0.01)
        except (ConnectionError, asyncio.CancelledError):
            self.client_gone.set()
            raise
        await resp.write_eof()
        return resp

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self.handle)
        return app


@pytest.fixture
async def pool() -> AsyncIterator[list[UpstreamPool]]:
    """Pools made by a test, closed at its end."""
    made: list[UpstreamPool] = []
    yield made
    for p in made:
        p.close()


def new_pool(made: list[UpstreamPool], url: str, timeout: float | None = 5.0,
             keepalive: float = 4.0) -> UpstreamPool:
    p = UpstreamPool(url, timeout, keepalive)
    made.append(p)
    return p


async def test_stream_read_and_connection_reused(aiohttp_server: ServerFactory,
                                                 pool: list[UpstreamPool]) -> None:
    """A stream read to its end gives its body, and the next request uses the same
    connection; the path prefix, Host, the headers and the body reach the upstream."""
    up = Upstream(events=3, size=5)
    server = await aiohttp_server(up.app())
    p = new_pool(pool, f"http://127.0.0.1:{server.port}/prefix")
    for n in range(2):
        async with await p.post("/v1/chat/completions", [("Authorization", "Bearer k")],
                                b'{"n":%d}' % n) as resp:
            assert resp.status == 200
            assert resp.headers["content-type"] == "text/event-stream"
            assert await resp.read() == b"".join(b"data: " + str(i).encode() * 5 + b"\n\n"
                                                 for i in range(3))
    assert len(up.ports) == 2
    assert up.ports[0] == up.ports[1]
    path, headers, body = up.seen[1]
    assert path == "/prefix/v1/chat/completions"
    assert headers["Host"] == f"127.0.0.1:{server.port}"
    assert headers["Authorization"] == "Bearer k"
    assert (headers["Content-Length"], body) == ("7", b'{"n":1}')


async def test_taken_headers_leave_the_response(aiohttp_server: ServerFactory,
                                               pool: list[UpstreamPool]) -> None:
    """``take_headers`` hands over the head's headers and the response keeps none of them
    (the proxy keeps what the client's response needs; a long stream holds no second copy);
    the body still reads in full."""
    server = await aiohttp_server(Upstream(events=2, size=3).app())
    p = new_pool(pool, f"http://127.0.0.1:{server.port}")
    async with await p.post("/v1/chat/completions", [], b"{}") as resp:
        headers = resp.take_headers()
        assert headers["Content-Type"] == "text/event-stream"
        assert len(resp.headers) == 0
        assert "Content-Type" not in resp.headers
        assert await resp.read() == b"data: 000\n\ndata: 111\n\n"


async def test_close_is_seen_by_the_upstream(aiohttp_server: ServerFactory,
                                             pool: list[UpstreamPool]) -> None:
    """``close()`` mid-stream ends the connection: the upstream's writes fail (vLLM aborts
    the request there), and the next request opens a new connection."""
    up = Upstream(forever=True)
    server = await aiohttp_server(up.app())
    p = new_pool(pool, f"http://127.0.0.1:{server.port}")
    async with await p.post("/v1/chat/completions", [], b"{}") as resp:
        assert await resp.readany()
        resp.close()
    await asyncio.wait_for(up.client_gone.wait(), 5)
    up.forever = False
    async with await p.post("/v1/chat/completions", [], b"{}") as resp:
        assert await resp.read()
    assert len(set(up.ports)) == 2


async def test_leaving_mid_body_closes(aiohttp_server: ServerFactory,
                                       pool: list[UpstreamPool]) -> None:
    """Leaving the block before the body ended (an exception, a cancellation) closes the
    connection rather than reusing it."""
    up = Upstream(forever=True)
    server = await aiohttp_server(up.app())
    p = new_pool(pool, f"http://127.0.0.1:{server.port}")
    with pytest.raises(RuntimeError, match="handler failed"):
        await _fail_mid_body(p)
    await asyncio.wait_for(up.client_gone.wait(), 5)


async def _fail_mid_body(p: UpstreamPool) -> None:
    async with await p.post("/v1/chat/completions", [], b"{}") as resp:
        await resp.readany()
        raise RuntimeError("handler failed")


async def test_idle_connection_closed_by_upstream_is_not_reused(
        aiohttp_server: ServerFactory, pool: list[UpstreamPool]) -> None:
    """An idle connection the upstream closed (its keep-alive timeout) is dropped: the next
    request opens a new one and succeeds."""
    up = Upstream()
    server = await aiohttp_server(up.app(), keepalive_timeout=0.1)
    p = new_pool(pool, f"http://127.0.0.1:{server.port}")
    for _ in range(2):
        async with await p.post("/v1/chat/completions", [], b"{}") as resp:
            assert await resp.read()
        await asyncio.sleep(0.4)
    assert len(set(up.ports)) == 2


async def test_reading_pauses_while_nobody_reads(aiohttp_server: ServerFactory,
                                                 pool: list[UpstreamPool]) -> None:
    """An upstream much faster than the reader: at most about ``HIGH_WATER`` bytes wait in
    the process, and every byte arrives once reading goes on. About: the socket read that
    crosses the mark (up to 256 KiB, the event loop's read size) and the body bytes that
    came with the head (one such read) come on top."""
    up = Upstream(events=2000, size=1000)  # about 2 MB
    server = await aiohttp_server(up.app())
    p = new_pool(pool, f"http://127.0.0.1:{server.port}")
    async with await p.post("/v1/chat/completions", [], b"{}") as resp:
        await asyncio.sleep(0.5)
        assert 0 < resp.unread <= HIGH_WATER + 2 * 256 * 1024
        body = await resp.read()
    assert len(body) == sum(len(b"data: \n\n") + 1000 * len(str(i)) for i in range(2000))


async def _raw(replies: list[Reply], pool: list[UpstreamPool]) -> tuple[RawUpstream, UpstreamPool]:
    upstream = RawUpstream(queue=list(replies))
    await upstream.start()
    return upstream, new_pool(pool, upstream.url)


async def test_close_mid_body_is_truncated(pool: list[UpstreamPool]) -> None:
    """The upstream closing mid-chunk raises ``Truncated`` from the read, after the bytes
    that did arrive."""
    upstream, p = await _raw([Reply(SSE_CHUNKED_HEAD + chunked(b"data: 1\n\n") + b"20\r\npart")],
                             pool)
    try:
        async with await p.post("/v1/chat/completions", [], b"{}") as resp:
            got = b""
            while len(got) < len(b"data: 1\n\npart"):
                got += await resp.readany()
            assert got == b"data: 1\n\npart"
            with pytest.raises(Truncated):
                await resp.readany()
    finally:
        await upstream.close()


@pytest.mark.parametrize("abort", [False, True])
async def test_close_before_the_head_is_truncated(pool: list[UpstreamPool], abort: bool) -> None:
    """A connection closed (or reset) before any head raises ``Truncated`` or an OSError
    from ``post``."""
    upstream, p = await _raw([Reply(b"", abort=abort)], pool)
    try:
        with pytest.raises((Truncated, OSError)):
            await p.post("/v1/chat/completions", [], b"{}")
    finally:
        await upstream.close()


async def test_malformed_response_is_a_protocol_error(pool: list[UpstreamPool]) -> None:
    """Bytes that are not an HTTP/1.1 response raise ``ProtocolError``."""
    upstream, p = await _raw([Reply(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")], pool)
    try:
        with pytest.raises(ProtocolError):
            await p.post("/v1/chat/completions", [], b"{}")
    finally:
        await upstream.close()


async def test_connect_timeout() -> None:
    """A connect that does not complete within the connect timeout (a listener whose accept
    queue is full drops the handshake) raises ``UpstreamTimeoutError`` saying so."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = [socket.socket() for _ in range(3)]
        try:
            for f in fillers:
                f.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    f.connect(("127.0.0.1", port))
            p = UpstreamPool(f"http://127.0.0.1:{port}", 0.3, 4.0)
            with pytest.raises(UpstreamTimeoutError, match=r"connect timed out after 0\.3 s"):
                await p.post("/v1/chat/completions", [], b"{}")
        finally:
            for f in fillers:
                f.close()


async def test_refused(pool: list[UpstreamPool], unused_tcp_port: int) -> None:
    """Nothing listening: ``post`` raises the connect's OSError."""
    p = new_pool(pool, f"http://127.0.0.1:{unused_tcp_port}")
    with pytest.raises(ConnectionRefusedError):
        await p.post("/v1/chat/completions", [], b"{}")


async def test_https_upstream_verified(aiohttp_server: ServerFactory, pool: list[UpstreamPool],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """An ``https://`` upstream is spoken to over TLS, its certificate checked against the
    default trust store (``SSL_CERT_FILE`` here, as an operator with a private CA would)."""
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(TLS / "upstream-cert.pem", TLS / "upstream-key.pem")
    up = Upstream(events=2, size=3)
    server = await aiohttp_server(up.app(), ssl=server_ctx)
    url = f"https://localhost:{server.port}"
    with pytest.raises(ssl.SSLCertVerificationError):
        await new_pool(pool, url).post("/v1/chat/completions", [], b"{}")
    monkeypatch.setenv("SSL_CERT_FILE", str(TLS / "upstream-cert.pem"))
    async with await new_pool(pool, url).post("/v1/chat/completions", [], b"{}") as resp:
        assert await resp.read() == b"data: 000\n\ndata: 111\n\n"
    assert up.seen[0][1]["Host"] == f"localhost:{server.port}"


async def test_watched_request_headers_reach_upstream_byte_for_byte() -> None:
    """Through the sidecar, a watched request's headers reach the upstream with their bytes
    (UTF-8 here), hop-by-hop ones dropped and the body's length recomputed."""
    event = b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",' \
            b'"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}\n\n'
    upstream = RawUpstream(default=Reply(SSE_CHUNKED_HEAD + chunked(event + b"data: [DONE]\n\n")
                                         + b"0\r\n\r\n"))
    await upstream.start()
    sidecar, _ = await start_sidecar(upstream.url)
    body = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}'
    try:
        async with aiohttp.ClientSession() as s, s.post(
                sidecar.make_url("/v1/chat/completions"), data=body,
                headers={"X-Name": "caf\u00e9 \u4e2d", "Keep-Alive": "timeout=5",
                         "Content-Type": "application/json"}) as r:
            assert r.status == 200
            assert (await r.read()).endswith(b"data: [DONE]\n\n")
    finally:
        await sidecar.close()
        await upstream.close()
    head = upstream.requests[0]
    assert b"\r\nX-Name: caf\xc3\xa9 \xe4\xb8\xad\r\n" in head
    assert b"keep-alive" not in head.lower()
    assert f"\r\nContent-Length: {len(body)}\r\n".encode() in head
