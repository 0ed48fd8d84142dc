"""Where a watched response goes: a live stream, or one body built at the end.

The sinks write to the client (the proxy's other half of network I/O). They are the same
for every wire API: what they write comes from the API's pure parts, its attempts and its
:class:`~sidecar.core.wire.Splicer` (bytes for a stream) or its
:class:`~sidecar.core.wire.Fold` (a body), and its error-body shape. Headers are not sent
until the first byte is, so an upstream failure before it still becomes a plain JSON
error with a status.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from sidecar.core.exchange import Exchange
from sidecar.core.wire import Fold, WireApi
from sidecar.errors import UpstreamError
from sidecar.net.headers import forward_headers


class Sink(abc.ABC):
    """Where a watched response goes. The sinks have slots: a stream's sink is read on
    every chunk, and its fields sit in the object itself, not in a dict beside it."""

    __slots__ = ("_final", "api", "bytes_sent", "status")

    def __init__(self, api: WireApi) -> None:
        self.api = api
        #: The status the client got (or gets), and the body bytes written to it.
        self.status = 200
        self.bytes_sent = 0
        #: The response as it will end, once it is settled before any byte went out: a
        #: relayed upstream answer, or an error.
        self._final: web.StreamResponse | None = None

    @abc.abstractmethod
    def upstream_headers(self, headers: Any) -> None:
        """The first 200 from upstream: remember its headers for the client response."""

    @abc.abstractmethod
    def write(self, data: bytes) -> Awaitable[None]:
        """Bytes for the client (a body sink gets none: its fold is fed instead), written
        when the returned awaitable is awaited (await it before the next write)."""

    def direct(self) -> Callable[[bytes], Awaitable[None]] | None:
        """The open response's own write, for a read loop's later chunks: it skips the
        sink's frame, and the caller adds the bytes it writes so to ``bytes_sent``. None
        while no response is open (and always for a body sink)."""
        return None

    async def relay(self, status: int, headers: Any, body: bytes) -> None:
        """The upstream answered with something other than a 200 stream: pass it on."""
        self.status = status
        self._final = web.Response(status=status, body=body, headers=forward_headers(headers))

    def _error_response(self, err: UpstreamError) -> None:
        self.status = err.status
        self._final = web.Response(status=err.status, body=self.api.upstream_error_body(err),
                                   content_type="application/json")

    @abc.abstractmethod
    async def fail(self, err: UpstreamError, error_frames: bytes) -> None:
        """Report ``err``: an error status with the API's error body, or, once the
        response started, ``error_frames`` (the splicer's in-stream error)."""

    def cut(self, action: str) -> None:  # noqa: B027 - a deliberate no-op default
        """A cut happened; ``action`` is what follows (``reissue``, ``cut``, ``finish``)."""

    @abc.abstractmethod
    async def finish(self, ex: Exchange) -> web.StreamResponse:
        """Complete the response and return it to aiohttp."""


class StreamSink(Sink):
    """A streaming client: the response starts with the first byte written."""

    __slots__ = ("_headers", "request", "response")

    def __init__(self, api: WireApi, request: web.Request) -> None:
        super().__init__(api)
        self.request = request
        self.response: web.StreamResponse | None = None
        self._headers: Any = None

    def upstream_headers(self, headers: Any) -> None:
        # Kept only until the response starts: then they are on the wire, and a stream
        # that waits for its next bytes does not hold them (the response has its copy).
        if self._headers is None and self.response is None:
            self._headers = headers

    async def _prepared(self) -> web.StreamResponse:
        if self.response is None:
            resp = web.StreamResponse(status=200, headers=forward_headers(self._headers or {}))
            if "Content-Type" not in resp.headers:
                resp.content_type = self.api.stream_type
            await resp.prepare(self.request)
            self.response = resp
            self._headers = None
        return self.response

    def write(self, data: bytes) -> Awaitable[None]:
        # Once per chunk: while the response is open this is the response's own write,
        # without a coroutine of the sink's around it.
        resp = self.response
        if resp is None:
            return self._first_write(data)
        self.bytes_sent += len(data)
        return resp.write(data)

    def direct(self) -> Callable[[bytes], Awaitable[None]] | None:
        resp = self.response
        return None if resp is None else resp.write

    async def _first_write(self, data: bytes) -> None:
        """Start the response, then write ``data``."""
        resp = await self._prepared()
        self.bytes_sent += len(data)
        await resp.write(data)

    async def fail(self, err: UpstreamError, error_frames: bytes) -> None:
        if self.response is None:
            self._error_response(err)
            return
        await self.write(error_frames)

    async def finish(self, ex: Exchange) -> web.StreamResponse:
        if self._final is not None:
            return self._final
        resp = await self._prepared()
        await resp.write_eof()
        return resp


class BodySink(Sink):
    """A non-streaming client: one body at the end, from the API's fold, with the
    ``X-Runaway-*`` headers when a cut happened."""

    __slots__ = ("_action", "_headers", "fold")

    def __init__(self, api: WireApi, fold: Fold) -> None:
        super().__init__(api)
        self.fold = fold
        self._headers: Any = None
        self._action: str | None = None

    def upstream_headers(self, headers: Any) -> None:
        if self._headers is None:
            self._headers = headers

    def write(self, data: bytes) -> Awaitable[None]:
        assert not data, "a body sink's attempts feed its fold, not bytes"
        return _nothing()

    async def fail(self, err: UpstreamError, error_frames: bytes) -> None:
        self._error_response(err)

    def cut(self, action: str) -> None:
        self._action = action

    async def finish(self, ex: Exchange) -> web.StreamResponse:
        if self._final is not None:
            return self._final
        answer = self.fold.response()
        self.status = answer.status
        if answer.status != 200:
            return web.Response(status=answer.status, body=answer.body,
                                content_type="application/json")
        headers = forward_headers(self._headers or {}, drop=("content-type",))
        if ex.verdicts and ex.mode != "shadow":
            headers["X-Runaway-Detector"] = ex.verdicts[0].detector
            headers["X-Runaway-Action"] = self._action or "reissue"
            headers["X-Runaway-Attempts"] = str(ex.attempts)
        self.bytes_sent = len(answer.body)
        resp = web.Response(status=200, body=answer.body, headers=headers)
        resp.content_type = "application/json"
        if answer.charset is not None:
            resp.charset = answer.charset
        return resp


async def _nothing() -> None:
    """An awaitable that writes nothing."""
