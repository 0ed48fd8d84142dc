"""The client's side of a request, before and around its answer: reading its body, the
error responses of the sidecar's own, and telling a client that went away from an
upstream that failed.

- :func:`read_body` reads a watched request's body whole, within ``max_body_bytes``;
  :func:`timed_body` and :class:`TimedBody` hand a pass-through body on as it arrives.
  Both give up when the client sends nothing for ``client_body_timeout_seconds``
  (:class:`~sidecar.errors.ClientBodyTimeout`): a slowloris body must not hold a handler,
  or an upstream connection, forever.
- :func:`json_error`, :func:`body_timeout_response` and :func:`in_stream_error` are the
  errors the sidecar answers itself, in the shape of the path's API.
- :func:`reset_by_client` tells a reset that is the client's doing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

from sidecar.config import Config
from sidecar.core.wire import WireApi
from sidecar.errors import ClientBodyTimeout, RequestTooLarge, UpstreamError, error_body

#: The exceptions of a connection reset, from a socket and from aiohttp.
RESETS = (ConnectionResetError, aiohttp.ClientConnectionResetError)


async def read_body(request: web.Request, cfg: Config) -> bytes:
    """The whole request body. Raises :class:`RequestTooLarge` past ``max_body_bytes``
    (at once when the declared length says so) and :class:`ClientBodyTimeout`."""
    limit = cfg.max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        raise RequestTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in timed_body(request, cfg.client_body_timeout_seconds):
        size += len(chunk)
        if size > limit:
            raise RequestTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


async def timed_body(request: web.Request, silence: float) -> AsyncIterator[bytes]:
    """The request body as it arrives; raises :class:`ClientBodyTimeout` when no byte came
    for ``silence`` seconds. What is left of it once it has all arrived comes in one
    piece, without a timer: nearly every body comes whole with its request's head."""
    reader = request.content
    while True:
        if reader.is_eof():
            rest = reader.read_nowait()
            if rest:
                yield rest
            return
        try:
            async with asyncio.timeout(silence):
                chunk = await reader.readany()
        except TimeoutError:
            raise ClientBodyTimeout from None
        if not chunk:
            return
        yield chunk


class TimedBody:
    """A pass-through request body for the upstream client, remembering whether it ended
    because the client stalled (aiohttp wraps the reason in a ``ClientConnectionError``)."""

    def __init__(self, request: web.Request, timeout: float) -> None:
        self._request, self._timeout = request, timeout
        self.timed_out = False

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's chunks as they arrive (see :func:`timed_body`)."""
        try:
            async for chunk in timed_body(self._request, self._timeout):
                yield chunk
        except ClientBodyTimeout:
            self.timed_out = True
            raise


def reset_by_client(exc: BaseException, request: web.Request) -> bool:
    """Whether ``exc`` is a connection reset while the client's connection is gone or
    closing: the client's doing, not the upstream's. A write to a client that went away
    fails before aiohttp has dropped the transport, while it is only closing."""
    transport = request.transport
    return isinstance(exc, RESETS) and (transport is None or transport.is_closing())


def json_error(api: WireApi | None, status: int, message: str, error_type: str,
               param: str | None = None) -> web.Response:
    """An error of the sidecar's own (or an upstream failure before any answer) in the
    shape of ``api``'s errors; OpenAI's on paths of no watched API."""
    body = (api.error_body(status, message, error_type, param) if api is not None
            else error_body(message, error_type, status, param))
    return web.Response(status=status, body=body, content_type="application/json")


def body_timeout_response(api: WireApi | None) -> web.Response:
    """The 408 of a client whose body stalled; the connection is closed after it."""
    resp = json_error(api, 408, "request body not received in time", "RequestTimeoutError")
    resp.force_close()  # the rest of the body may still trickle in: do not read it
    return resp


def in_stream_error(message: str, code: int | None) -> UpstreamError:
    """The error a non-streaming client gets for an in-stream ``{"error": ...}`` event."""
    err = UpstreamError(message or "upstream failed mid-response")
    if code is not None and 400 <= code < 600:
        err.status = code
    err.error_type = "InternalServerError" if err.status == 500 else err.error_type
    return err
