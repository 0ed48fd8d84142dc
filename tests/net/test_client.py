"""The client's side of a request: its body read within the size limit and the silence
timeout, against a real server on loopback; and the sidecar's own error responses."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from sidecar.apis.messages.api import MESSAGES
from sidecar.config import Config
from sidecar.errors import ClientBodyTimeout, RequestTooLarge
from sidecar.net.client import in_stream_error, json_error, read_body

ServerFactory = Callable[..., Awaitable[TestServer]]
CFG = Config(max_body_bytes=100, client_body_timeout_seconds=0.2)


async def _read_with(aiohttp_server: ServerFactory, send: Callable[[asyncio.StreamWriter],
                     Awaitable[None]]) -> bytes | type[Exception]:
    """What ``read_body`` made of a request whose bytes ``send`` writes on a raw socket."""
    seen: list[bytes | type[Exception]] = []

    async def handler(request: web.Request) -> web.Response:
        try:
            seen.append(await read_body(request, CFG))
        except (RequestTooLarge, ClientBodyTimeout) as exc:
            seen.append(type(exc))
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/", handler)
    server = await aiohttp_server(app)
    reader, writer = await asyncio.open_connection(server.host, server.port)
    await send(writer)
    await reader.read(1024)  # the response: the handler ran
    writer.close()
    return seen[0]


def _head(length: int | None) -> bytes:
    size = b"Content-Length: %d\r\n" % length if length is not None else (
        b"Transfer-Encoding: chunked\r\n")
    return b"POST / HTTP/1.1\r\nHost: x\r\n" + size + b"\r\n"


@pytest.mark.parametrize(("parts", "expected"), [
    ([_head(5) + b"hello"], b"hello"),
    ([_head(101)], RequestTooLarge),  # refused on the declared length, before any byte
    ([_head(None) + b"40\r\n" + b"x" * 64 + b"\r\n40\r\n" + b"x" * 64 + b"\r\n0\r\n\r\n"],
     RequestTooLarge),  # no length declared: refused once past the limit
    ([_head(5) + b"he", None], ClientBodyTimeout),  # (None: a pause over the timeout)
])
async def test_read_body(aiohttp_server: ServerFactory, parts: list[bytes | None],
                         expected: bytes | type[Exception]) -> None:
    """The whole body within ``max_body_bytes``; a body too large or stalled raises."""
    async def send(writer: asyncio.StreamWriter) -> None:
        for part in parts:
            if part is None:
                await asyncio.sleep(CFG.client_body_timeout_seconds * 2)
            else:
                writer.write(part)
                await writer.drain()

    assert await _read_with(aiohttp_server, send) == expected


def test_json_error_takes_the_apis_shape() -> None:
    """An error of the sidecar's own in the path's API shape, OpenAI's elsewhere."""
    anthropic = json_error(MESSAGES, 413, "too big", "RequestTooLargeError")
    assert anthropic.status == 413
    assert isinstance(anthropic.body, bytes)
    assert orjson.loads(anthropic.body)["type"] == "error"
    plain = json_error(None, 400, "bad", "BadRequestError", param="X-Runaway-Mode")
    assert isinstance(plain.body, bytes)
    assert orjson.loads(plain.body) == {"error": {
        "message": "bad", "type": "BadRequestError", "param": "X-Runaway-Mode", "code": 400}}


@pytest.mark.parametrize(("message", "code", "expected"), [
    ("boom", 500, (500, "InternalServerError", "boom")),
    ("", None, (502, "BadGatewayError", "upstream failed mid-response")),
    ("odd", 999, (502, "BadGatewayError", "odd")),  # no HTTP error status: the default
])
def test_in_stream_error(message: str, code: int | None,
                         expected: tuple[int, str, str]) -> None:
    """An in-stream error event becomes the error status a non-streaming client gets."""
    err = in_stream_error(message, code)
    assert (err.status, err.error_type, str(err)) == expected
