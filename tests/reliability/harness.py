"""Test helpers for reliability tests: a raw-socket fake upstream that serves arbitrary
bytes, a sidecar in front of any upstream, and a case generator for end-to-end fuzzing
(also used by ``benchmarks/fuzz.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
from dataclasses import dataclass, field
from typing import Any

from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry

from sidecar.config import Config
from sidecar.obs.metrics import Metrics
from sidecar.service.app import make_app

CASE_HEADER = "X-Fuzz-Case"
#: A 200 event-stream response head with chunked framing, for ``Reply`` data.
SSE_CHUNKED_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")


def chunked(data: bytes) -> bytes:
    """``data`` as one HTTP/1.1 chunk (no terminating zero-size chunk)."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


@dataclass
class Reply:
    """What the fake upstream writes on a connection, then how it ends it."""

    data: bytes
    abort: bool = False  # RST instead of FIN
    stall: float = 0.0  # seconds of silence after ``data`` before ending


@dataclass
class RawUpstream:
    """An HTTP/1.1 server on 127.0.0.1 that answers each request with the next of
    ``queue`` while it lasts, then with ``replies[case]`` (chosen by the ``X-Fuzz-Case``
    header, else ``default``), byte for byte."""

    replies: dict[str, Reply] = field(default_factory=dict)
    queue: list[Reply] = field(default_factory=list)
    default: Reply = field(default_factory=lambda: Reply(b"HTTP/1.1 204 No Content\r\n\r\n"))
    opened: int = 0
    closed: int = 0
    requests: list[bytes] = field(default_factory=list)
    _server: asyncio.Server | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def close(self) -> None:
        """Stop listening and end every connection still open (stalled ones included)."""
        self._stop.set()
        if self._server is not None:
            self._server.close()
        if self._tasks:
            await asyncio.wait(self._tasks)
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.opened += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            await _read_body(reader, head)
            self.requests.append(head)
            case = _header(head, CASE_HEADER)
            reply = self.queue.pop(0) if self.queue else self.replies.get(case or "",
                                                                          self.default)
            writer.write(reply.data)
            await writer.drain()
            if reply.stall:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), reply.stall)
            if reply.abort:
                writer.transport.abort()
            else:
                writer.close()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            writer.transport.abort()
        finally:
            self.closed += 1
            self._tasks.discard(task)


def _header(head: bytes, name: str) -> str | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name.lower().encode():
            return value.strip().decode("latin-1")
    return None


async def _read_body(reader: asyncio.StreamReader, head: bytes) -> None:
    length = _header(head, "Content-Length")
    if length is not None:
        await reader.readexactly(int(length))
    elif (_header(head, "Transfer-Encoding") or "").lower() == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip().split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                return


async def start_sidecar(upstream: str, *, lingering_time: float | None = None,
                        **config: Any) -> tuple[TestServer, CollectorRegistry]:
    """A sidecar on 127.0.0.1 in front of ``upstream``; ``config`` sets Config fields
    (``detectors`` may be a dict of DetectorConfig fields). ``lingering_time`` shortens
    aiohttp's lingering read of an unread request body (10 s by default) for this
    server."""
    cfg = Config(upstream=upstream)
    det = config.pop("detectors", None)
    if det:
        config["detectors"] = dataclasses.replace(cfg.detectors, **det)
    cfg = dataclasses.replace(cfg, **config)
    registry = CollectorRegistry()
    server = TestServer(make_app(cfg, Metrics(registry, ["*"], "test")), host="127.0.0.1")
    if lingering_time is None:
        await server.start_server()
    else:
        await server.start_server(lingering_time=lingering_time)
    return server, registry


# -- end-to-end fuzz cases --------------------------------------------------------------

_CHUNK = (b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
          b'"choices":[{"index":0,"delta":{"reasoning":"word %d "},"finish_reason":null}]}\n\n')
_FINAL = (b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
          b'"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}\n\n'
          b"data: [DONE]\n\n")
_TOKENS = [b"data: ", b"data:", b": keep-alive", b"\n", b"\r\n", b"\r", b"\n\n", b"[DONE]",
           b"{", b"}", b'"choices":', b"[", b"]", b'{"error":{"message":"x","code":500}}',
           b"\xff", b"\xc3", b"null", b'"index":', b"1e309", b"-1", b'"delta":"s"']


@dataclass(frozen=True)
class FuzzCase:
    """One upstream reply (head, body, ending) and the client request that meets it."""

    status: int
    content_type: str
    framing: str  # "length", "chunked", "close", "garbage"
    body: bytes
    abort: bool
    client_stream: bool
    watched: bool

    def reply(self) -> Reply:
        if self.framing == "garbage":
            return Reply(self.body, abort=self.abort)
        head = f"HTTP/1.1 {self.status} X\r\nContent-Type: {self.content_type}\r\n"
        body = self.body
        if self.framing == "length":
            head += f"Content-Length: {len(body)}\r\n"
        elif self.framing == "chunked":
            head += "Transfer-Encoding: chunked\r\n"
            body = (chunked(body) if body else b"") + b"0\r\n\r\n"
        head += "Connection: close\r\n\r\n"
        return Reply(head.encode() + body, abort=self.abort)


def random_body(rng: random.Random) -> bytes:
    """A stream body: a valid vLLM-like stream, mutated, truncated or pure noise."""
    kind = rng.random()
    valid = b"".join(_CHUNK % i for i in range(rng.randint(0, 30))) + _FINAL
    if kind < 0.25:
        return valid
    if kind < 0.5:
        data = bytearray(valid)
        for _ in range(rng.randint(1, 8)):
            pos = rng.randrange(len(data))
            op = rng.random()
            if op < 0.4:
                data[pos] = rng.randrange(256)
            elif op < 0.7:
                del data[pos : pos + rng.randint(1, 40)]
            else:
                data[pos:pos] = rng.choice(_TOKENS)
        return bytes(data)
    if kind < 0.65:
        return valid[: rng.randrange(len(valid))]
    if kind < 0.9:
        return b"".join(rng.choice(_TOKENS) for _ in range(rng.randint(0, 60)))
    return rng.randbytes(rng.randint(0, 400))


def random_case(rng: random.Random) -> FuzzCase:
    """A random upstream reply and client request."""
    return FuzzCase(
        status=rng.choice([200, 200, 200, 200, 400, 500, 503]),
        content_type=rng.choice(["text/event-stream", "text/event-stream; charset=utf-8",
                                 "application/json", "text/plain"]),
        framing=rng.choice(["length", "chunked", "close", "close", "garbage"]),
        body=random_body(rng),
        abort=rng.random() < 0.2,
        client_stream=rng.random() < 0.6,
        watched=rng.random() < 0.85,
    )


_ERROR_TAIL_START = b'data: {"error":'
_DONE = b"data: [DONE]\n\n"


async def run_case(session: Any, sidecar_url: str, case_id: str, case: FuzzCase,
                   deadline: float = 15.0) -> str:
    """Send ``case``'s client request through the sidecar (whose upstream must serve
    ``case.reply()`` for ``X-Fuzz-Case: case_id``) and check what the client got: the
    upstream's bytes, or a well-formed error, within ``deadline`` seconds. Returns a
    label for the outcome; raises ``AssertionError`` on a violation."""
    import aiohttp
    import orjson

    headers = {CASE_HEADER: case_id}
    if case.watched:
        method, path = "POST", "/v1/chat/completions"
        body: bytes | None = orjson.dumps({"model": "m", "stream": case.client_stream,
                                           "messages": [{"role": "user", "content": "hi"}]})
        headers["Content-Type"] = "application/json"
    else:
        method, path, body = "GET", "/v1/models", None
    upstream = case.body
    async with asyncio.timeout(deadline):
        try:
            async with session.request(method, sidecar_url + path, data=body,
                                       headers=headers) as resp:
                status, data = resp.status, await resp.read()
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError):
            # Only a pass-through may mirror a broken upstream body by breaking too.
            assert not case.watched, f"watched response broke off: {case}"
            return "passthrough_truncated"
    if not case.watched:
        if data == upstream or status == case.status:
            return "passthrough"
        assert status in (502, 504), (status, data, case)
        assert orjson.loads(data)["error"]["code"] == status
        return "passthrough_error"
    if status != 200:
        if data == upstream:
            return "relayed"
        err = orjson.loads(data)["error"]
        assert err["code"] == status, (status, data, case)
        return f"error_{status}"
    if not case.client_stream:
        if data == upstream:
            return "relayed"
        assert isinstance(orjson.loads(data), dict), (data, case)
        return "aggregated"
    if data == upstream:
        return "stream_exact"
    cut = data.rfind(_ERROR_TAIL_START)
    assert cut >= 0, f"stream differs from upstream without an error event: {case}"
    assert upstream.startswith(data[:cut]), case
    tail = data[cut:]
    assert tail.endswith(b"\n\n" + _DONE), tail
    orjson.loads(tail[6 : -len(_DONE) - 2])
    return "stream_error"
