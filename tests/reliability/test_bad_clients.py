"""Bad client input: oversized headers, slowloris heads and bodies, a client that stops
reading. Each has a defined result and bounded resources."""

from __future__ import annotations

import asyncio
import socket
import time

import orjson
import pytest

from tests.reliability.harness import RawUpstream, Reply, start_sidecar

OK = Reply(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")


async def raw_exchange(port: int, data: bytes, *, pace: float = 0.0,
                       limit: float = 10.0) -> tuple[bytes, float]:
    """Send ``data`` (one byte per ``pace`` seconds if set), read until EOF; return what
    came back and how long until the server closed."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    got = b""
    async with asyncio.timeout(limit):
        try:
            if pace:
                for i in range(len(data)):
                    writer.write(data[i : i + 1])
                    await writer.drain()
                    await asyncio.sleep(pace)
            else:
                writer.write(data)
            got = await reader.read(-1)
        except (ConnectionResetError, BrokenPipeError):
            pass
    took = time.monotonic() - started
    writer.close()
    return got, took


@pytest.fixture
async def upstream() -> RawUpstream:
    """A fake upstream that answers every request with a 200 "ok"."""
    up = RawUpstream(default=OK)
    await up.start()
    yield up  # type: ignore[misc]
    await up.close()


@pytest.mark.parametrize(("limit", "expected"), [(8190, b" 400 Bad Request"), (32768, b" 200 OK")])
async def test_oversized_header(upstream: RawUpstream, limit: int, expected: bytes) -> None:
    """A 16 KiB header gets a 400 under the default limit and passes under a raised one."""
    sidecar, _ = await start_sidecar(upstream.url, max_header_bytes=limit)
    head = (b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 16384
            + b"\r\nConnection: close\r\n\r\n")
    got, _ = await raw_exchange(sidecar.port, head)
    await sidecar.close()
    assert got.split(b"\r\n", 1)[0].endswith(expected)
    assert len(upstream.requests) == (1 if limit > 16384 else 0)


async def test_slowloris_head_is_closed(upstream: RawUpstream) -> None:
    """A client dribbling its request head is disconnected after the header timeout."""
    sidecar, _ = await start_sidecar(upstream.url, client_header_timeout_seconds=1.0)
    head = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 200 + b"\r\n\r\n"
    got, took = await raw_exchange(sidecar.port, head, pace=0.05, limit=8)
    await sidecar.close()
    assert got == b""  # closed without a response: the head never completed
    assert 0.9 < took < 3.0
    assert upstream.requests == []


#: aiohttp's lingering read of an unread body, shortened from its default of 10 s.
LINGER = 1.0


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/tokenize"])
async def test_slowloris_body_gets_408(upstream: RawUpstream, path: str) -> None:
    """A body that stops arriving gets a 408 at once and a closed connection after
    aiohttp's lingering read (``LINGER`` here), watched route or pass-through."""
    sidecar, registry = await start_sidecar(upstream.url, client_body_timeout_seconds=0.5,
                                            lingering_time=LINGER)
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "Content-Length: 1000\r\n\r\n").encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", sidecar.port)
    started = time.monotonic()
    writer.write(head + b'{"model": "m"')
    async with asyncio.timeout(3):
        status = await reader.readuntil(b"\r\n\r\n")
        body = await reader.read(200)
    answered = time.monotonic() - started
    async with asyncio.timeout(LINGER + 4):
        rest = await reader.read(-1)
    closed = time.monotonic() - started
    writer.close()
    await sidecar.close()
    assert status.startswith(b"HTTP/1.1 408")
    assert orjson.loads(body)["error"]["code"] == 408
    assert rest == b""
    assert 0.4 < answered < 2.0
    assert closed < 0.5 + LINGER + 2
    assert not registry.get_sample_value("runaway_sidecar_upstream_errors_total",
                                         {"kind": "timeout"})  # the client's fault


STREAM_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
               b"Connection: close\r\n\r\n")


class Firehose:
    """An upstream that streams distinct SSE chunks as fast as the socket takes them,
    counting the bytes it managed to hand to the kernel."""

    def __init__(self) -> None:
        self.sent = 0
        self.ended = asyncio.Event()
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        try:
            writer.write(STREAM_HEAD)
            for i in range(2_000_000):  # bounded: at most ~300 MB
                event = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,'
                         b'"model":"m","choices":[{"index":0,"delta":{"content":"n%d "},'
                         b'"finish_reason":null}]}\n\n' % i)
                writer.write(event)
                self.sent += len(event)
                await writer.drain()
        except (ConnectionResetError, BrokenPipeError):
            pass
        finally:
            writer.transport.abort()
            self.ended.set()

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()


async def stopped_sending(hose: Firehose, quiet: float = 0.3, limit: float = 10.0) -> int:
    """Wait until ``hose`` has handed the kernel nothing new for ``quiet`` seconds and at
    least 6 looks in a row (a process held off the CPU for a while is not taken for a
    blocked one); return what it had sent. Fails if it is still sending after ``limit``."""
    deadline = time.monotonic() + limit
    last, since, looks = hose.sent, time.monotonic(), 0
    while time.monotonic() - since < quiet or looks < 6:
        assert time.monotonic() < deadline, f"the upstream never stopped: {hose.sent} bytes"
        await asyncio.sleep(0.05)
        looks += 1
        if hose.sent != last:
            last, since, looks = hose.sent, time.monotonic(), 0
    return last


@pytest.mark.parametrize(("path", "mode"), [("/v1/chat/completions", "shadow"),
                                            ("/v1/chat/completions", "off"),
                                            ("/stream", "shadow")])
async def test_stopped_reader_backpressures_upstream(path: str, mode: str) -> None:
    """A client that stops reading stalls the upstream once socket buffers are full: the
    sidecar holds a bounded amount, and the upstream connection closes when the client
    leaves."""
    hose = Firehose()
    sidecar, _ = await start_sidecar(await hose.start(), mode=mode)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", sidecar.port))
    body = orjson.dumps({"model": "m", "stream": True, "messages": []})
    sock.send(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    plateau = await stopped_sending(hose)
    await asyncio.sleep(0.5)
    # Nothing read by the client: the upstream got stuck after a bounded amount (kernel
    # buffers on both loopback hops plus aiohttp's 64 KiB-scale buffers) ...
    assert hose.sent - plateau < 256 * 1024
    assert hose.sent < 32 * 1024 * 1024
    # ... and leaving frees it.
    sock.close()
    async with asyncio.timeout(5):
        await hose.ended.wait()
    await sidecar.close()
    await hose.close()
