"""The pass-through relay: every request the sidecar does not watch, relayed as it is.

Status, headers (minus hop-by-hop) and body are relayed as they arrive, in both
directions, on aiohttp's client (one pool per process, whose idle connections are kept
``upstream_keepalive_seconds``). The same client carries the sidecar's own probes of the
upstream (``dialect = "auto"``, readiness).

The resend rule (:meth:`Relay.request`): a request that went out on a reused connection
which closed before any byte of a response was never read by the upstream (it had closed
the connection idle). Such a request is sent once more, on a new connection, and counted
(``runaway_sidecar_upstream_retries_total{pool="passthrough"}``), if its body is held
whole: a body of a known length up to :data:`PASSTHROUGH_RESEND_BYTES` is read before it
is sent. Larger bodies, and bodies of unknown length, are streamed as they arrive and
never sent twice.
"""

from __future__ import annotations

import asyncio
import errno
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import aiohttp
from aiohttp import web
from yarl import URL

from sidecar.apis import api_for_path
from sidecar.config import Config
from sidecar.dialects import ProbeAnswer
from sidecar.errors import ClientBodyTimeout, map_upstream_exception
from sidecar.labels import Outcome
from sidecar.net import accounting
from sidecar.net.client import (
    TimedBody,
    body_timeout_response,
    json_error,
    reset_by_client,
    timed_body,
)
from sidecar.net.headers import forward_headers
from sidecar.obs.metrics import Metrics

#: Pass-through request bodies of a known length up to this size are read whole before they
#: are sent, so that one can be sent again when its reused upstream connection closed before
#: answering. Larger bodies, and bodies of unknown length, are streamed as they arrive and
#: never sent twice.
PASSTHROUGH_RESEND_BYTES = 1024 * 1024
#: How long a probe of the upstream may take, and how much of its body is read.
_PROBE_SECONDS = 2
_PROBE_BYTES = 64 * 1024


class Relay:
    """The pass-through client of one upstream (``base``, e.g. ``http://127.0.0.1:8000``)."""

    def __init__(self, base: str, metrics: Metrics) -> None:
        self._base = base
        self._metrics = metrics
        self._session: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None  # new connections only, for resends

    async def start(self, cfg: Config) -> None:
        """Open the upstream pool, which keeps idle connections
        ``upstream_keepalive_seconds`` (its timer closes them), and a second client whose
        connections are never reused, for resends."""
        keepalive = cfg.upstream_keepalive_seconds
        reuse = aiohttp.TraceConfig()
        reuse.on_connection_reuseconn.append(_note_reuse)
        self._session = _client(cfg, aiohttp.TCPConnector(
            limit=0, enable_cleanup_closed=True, keepalive_timeout=keepalive,
        ) if keepalive > 0 else aiohttp.TCPConnector(limit=0, force_close=True), [reuse])
        self._fresh = _client(cfg, aiohttp.TCPConnector(limit=0, force_close=True), [])

    async def close(self) -> None:
        """Close both clients."""
        for session in (self._session, self._fresh):
            if session is not None:
                await session.close()

    async def probe(self, path: str) -> ProbeAnswer:
        """``GET path`` on the upstream: its status, ``Server`` header and the start of
        its body (``ProbeAnswer(None)`` when it did not answer in time)."""
        try:
            async with await self.request("GET", self._base + path, timeout=aiohttp.ClientTimeout(
                    total=_PROBE_SECONDS)) as resp:
                return ProbeAnswer(resp.status, resp.headers.get("Server", ""),
                                   await resp.content.read(_PROBE_BYTES))
        except (TimeoutError, aiohttp.ClientError, OSError):
            return ProbeAnswer(None)

    async def ready(self, path: str) -> bool:
        """Whether the upstream answers ``GET path`` with a 2xx in time."""
        try:
            async with await self.request("GET", self._base + path, timeout=aiohttp.ClientTimeout(
                    total=_PROBE_SECONDS)) as resp:
                return 200 <= resp.status < 300
        except (TimeoutError, aiohttp.ClientError, OSError):
            return False

    async def request(self, method: str, url: str | URL, *, data: Any = None,
                      resendable: bool = True, **kwargs: Any) -> aiohttp.ClientResponse:
        """Send a request and return its response, whose head has arrived (use it as an
        async context manager). A ``resendable`` request (its body is held whole, or it has
        none) is sent once more by the resend rule (see the module docstring)."""
        assert self._session is not None, "start() was not awaited"
        reused = _Reused()
        try:
            return await self._session.request(method, url, data=data, allow_redirects=False,
                                               trace_request_ctx=reused, **kwargs)
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError,
                aiohttp.ClientConnectionResetError) as exc:
            if not (resendable and reused.reused and _unanswered(exc)):
                raise
        self._metrics.upstream_retry("passthrough")
        assert self._fresh is not None
        return await self._fresh.request(method, url, data=data, allow_redirects=False,
                                         **kwargs)

    async def relay(self, request: web.Request, cfg: Config,
                    body: bytes | None = None) -> web.StreamResponse:
        """Relay ``request`` as it is; ``body`` replaces the request stream when a watched
        handler already read it."""
        started = time.monotonic()
        if not request.raw_path.startswith("/"):
            return json_error(None, 400, "request target must be a path", "BadRequestError")
        sent = _Sent()
        try:
            return await self._relay(request, cfg, body, sent)
        except asyncio.CancelledError:
            if sent.outcome != "client_disconnect":
                sent.outcome = "client_disconnect"
                self._metrics.client_disconnect("passthrough")
            raise
        finally:
            accounting.passthrough_done(
                self._metrics, request, outcome=sent.outcome,
                status=sent.response.status if sent.response else 502,
                upstream_status=sent.upstream_status, bytes_sent=sent.bytes,
                seconds=time.monotonic() - started)

    async def _relay(self, request: web.Request, cfg: Config, body: bytes | None,
                     sent: _Sent) -> web.StreamResponse:
        """:meth:`relay`'s exchange, whose progress and outcome ``sent`` keeps."""
        data: Any = body
        timed: TimedBody | None = None
        try:
            if body is None and request.body_exists:
                length = request.content_length
                if length is not None and length <= PASSTHROUGH_RESEND_BYTES:
                    data = b"".join([chunk async for chunk in timed_body(
                        request, cfg.client_body_timeout_seconds)])
                else:
                    timed = TimedBody(request, cfg.client_body_timeout_seconds)
                    data = timed.chunks()
            async with await self.request(
                request.method, URL(self._base + request.raw_path, encoded=True), data=data,
                resendable=timed is None, headers=forward_headers(request.headers),
            ) as up:
                return await _copy(request, up, sent)
        except ClientBodyTimeout:
            sent.outcome = "rejected"  # the client's body stalled, not the upstream
            return body_timeout_response(api_for_path(request.path))
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            return self._failed(request, exc, timed, sent)

    def _failed(self, request: web.Request, exc: BaseException, timed: TimedBody | None,
                sent: _Sent) -> web.StreamResponse:
        """What a failure to relay becomes: the client's disconnect (raised as a
        cancellation), a 408 for a body that stalled, or an upstream error (a JSON error
        before the response started, else a cut connection)."""
        resp = sent.response
        if resp is not None and reset_by_client(exc, request):
            sent.outcome = "client_disconnect"
            self._metrics.client_disconnect("passthrough")
            # As the watched path does: a client that went away is no server error,
            # and aiohttp logs any other exception from a handler with a traceback.
            raise asyncio.CancelledError from None
        if timed is not None and timed.timed_out and resp is None:
            sent.outcome = "rejected"  # the client's body stalled, not the upstream
            return body_timeout_response(api_for_path(request.path))
        err = map_upstream_exception(exc, headers_received=resp is not None)
        self._metrics.upstream_error(err.kind)
        sent.outcome = "upstream_error"
        if resp is None:
            return json_error(api_for_path(request.path), err.status, str(err), err.error_type)
        # Headers are gone and the body is not ours to frame: cut the connection so the
        # client sees a truncated response rather than a silent short one.
        if request.transport is not None:
            request.transport.close()
        return resp


@dataclass(slots=True)
class _Sent:
    """How far a pass-through request got, for its ``access`` line."""

    outcome: Outcome = "ok"
    #: The client's response, once the upstream's head arrived.
    response: web.StreamResponse | None = None
    upstream_status: int | None = None
    bytes: int = 0


async def _copy(request: web.Request, up: aiohttp.ClientResponse,
                sent: _Sent) -> web.StreamResponse:
    """Relay the upstream's response ``up`` to the client as it arrives."""
    sent.upstream_status = up.status
    resp = sent.response = web.StreamResponse(status=up.status, reason=up.reason,
                                              headers=forward_headers(up.headers))
    if up.content_length is not None and "Transfer-Encoding" not in up.headers:
        resp.content_length = up.content_length
    await resp.prepare(request)
    async for chunk in up.content.iter_any():
        sent.bytes += len(chunk)
        await resp.write(chunk)
        del chunk  # not held while the next read waits
    await resp.write_eof()
    return resp


class _Reused:
    """Whether a pass-through request went out on a reused connection (set by the trace
    callback :func:`_note_reuse`)."""

    __slots__ = ("reused",)

    def __init__(self) -> None:
        self.reused = False


async def _note_reuse(_session: aiohttp.ClientSession, ctx: SimpleNamespace,
                      _params: aiohttp.TraceConnectionReuseconnParams) -> None:
    if isinstance(ctx.trace_request_ctx, _Reused):
        ctx.trace_request_ctx.reused = True


def _unanswered(exc: BaseException) -> bool:
    """Whether ``exc``, raised before the response head, says the connection closed before
    any byte of a response: aiohttp's ``ServerDisconnectedError`` carries what it had parsed
    of a response, and only a text when it had none; a reset comes before any response."""
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return isinstance(exc.message, str)
    if isinstance(exc, aiohttp.ClientConnectionResetError):
        return True
    return isinstance(exc, aiohttp.ClientOSError) and exc.errno in (errno.ECONNRESET,
                                                                    errno.EPIPE)


def _client(cfg: Config, connector: aiohttp.TCPConnector,
            traces: list[aiohttp.TraceConfig]) -> aiohttp.ClientSession:
    """An upstream client for pass-through routes, with the configured timeouts."""
    session = aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(
            total=None,
            connect=cfg.upstream_connect_timeout_seconds,
            sock_read=cfg.upstream_read_timeout_seconds,
        ),
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
        trace_configs=traces,
    )
    # aiohttp resends an idempotent request once when its connection closes before the
    # response, whatever the connection, the body or the bytes received; ``Relay.request``
    # resends by its own rule (any method, reused connection, nothing received, body held)
    # and counts it, so aiohttp's is switched off: a request goes out at most twice.
    session._retry_connection = False
    return session
