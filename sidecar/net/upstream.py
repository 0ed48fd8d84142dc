"""The watched requests' upstream connections: HTTP/1.1 on asyncio transports, kept alive
between requests, one pool per process. The framing is :mod:`sidecar.codecs.http1`'s; this module
only moves bytes and waits for them (see that module for why not aiohttp's client).

Contract of :class:`UpstreamPool.post`: it writes the request on an idle connection, or a
new one (within ``connect_timeout``), and returns an :class:`UpstreamResponse` whose head
has arrived. Use the response as an async context manager: leaving the block returns the
connection to the pool when the response was read to its end and may be followed by
another, and closes it otherwise. :meth:`UpstreamResponse.close` closes it at once, which
is how a stream is cut: the upstream sees the disconnect and aborts the request (vLLM
frees its KV cache).

Keep-alive: an idle connection is reused for at most ``keepalive`` seconds, and a timer
closes it then, whether or not the pool is used again (an idle node holds no upstream
connection for longer). The upstream may close an idle connection at any moment, also
while a request is being written on it (uvicorn closes its idle connections after 5 s,
which is why ``keepalive`` defaults below that). When a reused connection closes before
any byte of the response arrived, the upstream never read the request: ``post`` sends it
once more, on a new connection, and calls ``on_retry``. A connection that was new, or one
that closes after the response began, is never retried.

Errors: :class:`~sidecar.errors.UpstreamTimeoutError` when the connect timeout passes (made
by ``sidecar.errors.map_upstream_exception``), and, for the caller to map there:
``OSError`` from connecting or from the socket, :class:`~sidecar.codecs.http1.Truncated`
when the connection closed before the head or mid-body, and
:class:`~sidecar.codecs.http1.ProtocolError` for a response that is not HTTP/1.1.

Reading is flow-controlled: the socket stops being read once :data:`HIGH_WATER` bytes wait
unread (a client slower than the upstream), and resumes when they are taken.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import cast

from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from sidecar.codecs.http1 import ResponseHead, ResponseReader, Truncated, request_head
from sidecar.errors import Waited, map_upstream_exception

#: Unread bytes at which a connection stops reading its socket.
HIGH_WATER = 256 * 1024
#: The idle timer closes connections this close to their end of keep-alive as well: timers
#: (uvloop's count milliseconds) may fire a little early, and must not fire again at once.
_TIMER_SLACK = 0.005


class _Connection(asyncio.Protocol):
    """One upstream socket: collects what arrives until :meth:`read` takes it."""

    __slots__ = ("_paused", "_pieces", "_size", "_waiter", "closed", "idle_since", "transport")

    def __init__(self) -> None:
        self._pieces: list[bytes] = []
        self._size = 0
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self.closed = False
        self.idle_since = 0.0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not derive from asyncio.Transport: no isinstance check.
        self.transport = cast("asyncio.Transport", transport)

    def data_received(self, data: bytes) -> None:
        self._pieces.append(data)
        self._size += len(data)
        if self._size > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():  # cancelled by a timeout meanwhile
                waiter.set_result(None)

    def eof_received(self) -> bool:
        self._lost()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost()

    def _lost(self) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def read(self) -> bytes:
        """What arrived since the last read, waiting for something; ``b""`` once the
        connection is closed and everything was read."""
        if not self._pieces:
            if self.closed:
                return b""
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            await waiter
            if not self._pieces:
                return b""
        pieces = self._pieces
        self._pieces = []
        self._size = 0
        if self._paused:
            self._paused = False
            if self.transport is not None and not self.closed:
                self.transport.resume_reading()
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    @property
    def buffered(self) -> int:
        """Bytes received and not taken by :meth:`read` yet."""
        return self._size

    @property
    def reusable(self) -> bool:
        """Open, and nothing arrived while it sat idle (a response nobody asked for)."""
        return not self.closed and not self._pieces

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


#: What ``UpstreamResponse.headers`` reads once ``take_headers`` took them.
_TAKEN: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict())


class UpstreamResponse:
    """A response whose head arrived; its body is read with :meth:`readany`."""

    __slots__ = ("_conn", "_pending", "_pool", "_reader", "headers", "status")

    def __init__(self, pool: UpstreamPool, conn: _Connection, reader: ResponseReader,
                 head: ResponseHead, pending: bytes) -> None:
        self._pool, self._conn, self._reader = pool, conn, reader
        self._pending = pending
        self.status = head.status
        self.headers: CIMultiDict[str] | CIMultiDictProxy[str] = head.headers

    def take_headers(self) -> CIMultiDict[str] | CIMultiDictProxy[str]:
        """The head's headers, which this response then stops holding (``headers`` is
        empty afterwards): a caller that keeps what it needs of them frees the rest
        while the body streams, for as long as it streams."""
        headers, self.headers = self.headers, _TAKEN
        return headers

    @property
    def unread(self) -> int:
        """Bytes received and not read yet (flow control keeps this near ``HIGH_WATER``)."""
        return self._conn.buffered + len(self._pending)

    async def readany(self) -> bytes:
        """The next body bytes, as soon as there are some; ``b""`` at the end of the body.
        Raises :class:`~sidecar.codecs.http1.Truncated` if the connection closes before it."""
        pending = self._pending
        if pending:
            self._pending = b""
            return pending
        reader = self._reader
        while not reader.done:
            data = await self._conn.read()
            if not data:
                reader.eof()
                return b""
            out = reader.body(data)
            if out:
                return out
        return b""

    async def read(self) -> bytes:
        """The rest of the body."""
        parts = []
        while chunk := await self.readany():
            parts.append(chunk)
        return b"".join(parts)

    def close(self) -> None:
        """Close the connection now (the upstream sees a disconnect)."""
        self._conn.close()

    def release(self) -> None:
        """Give the connection back to the pool if the response ended cleanly and the
        connection may carry another request (and was not closed); close it otherwise."""
        if (self._reader.done and self._reader.reusable and not self._pending
                and not self._conn.closed):
            self._pool.put(self._conn)
        else:
            self._conn.close()

    async def __aenter__(self) -> UpstreamResponse:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc_type is None:
            self.release()
        else:
            self._conn.close()


class UpstreamPool:
    """Keep-alive HTTP/1.1 connections to the upstream at ``base`` (``http://`` or
    ``https://``, with an optional path prefix). An idle connection is kept ``keepalive``
    seconds (0: none is kept); ``on_retry`` is called for each request sent again because
    its reused connection closed unanswered (see the module docstring)."""

    def __init__(self, base: str, connect_timeout: float | None, keepalive: float,
                 on_retry: Callable[[], None] = lambda: None) -> None:
        url = URL(base)
        assert url.host is not None, base
        self._host = url.host
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._authority = url.host_port_subcomponent or self._host
        self._prefix = url.path.rstrip("/")
        self._ssl = ssl.create_default_context() if url.scheme == "https" else None
        self._connect_timeout = connect_timeout
        self._keepalive = keepalive
        self._on_retry = on_retry
        # Oldest first: ``put`` appends, ``_take`` pops the newest, the timer closes the oldest.
        self._idle: collections.deque[_Connection] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None

    @property
    def idle(self) -> int:
        """Idle connections held (some may have been closed by the upstream meanwhile)."""
        return len(self._idle)

    def put(self, conn: _Connection) -> None:
        """Keep ``conn`` for the next request (the newest is used first), and arm the timer
        that closes it after ``keepalive`` seconds unless a request takes it first."""
        if self._keepalive <= 0:
            conn.close()
            return
        loop = asyncio.get_running_loop()
        conn.idle_since = loop.time()
        self._idle.append(conn)
        if self._timer is None:
            self._timer = loop.call_at(conn.idle_since + self._keepalive, self._expire)

    def _expire(self) -> None:
        """The idle timer: close the connections idle for ``keepalive`` (and any closed
        ones met on the way), then wait for the next one to expire."""
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time() + _TIMER_SLACK
        idle = self._idle
        while idle and not self._usable(idle[0], now):
            idle.popleft().close()
        if idle:
            self._timer = loop.call_at(idle[0].idle_since + self._keepalive, self._expire)

    def _usable(self, conn: _Connection, now: float) -> bool:
        """Whether the idle ``conn`` may carry the next request: open, quiet while idle,
        and idle for less than ``keepalive``."""
        return conn.reusable and now - conn.idle_since < self._keepalive

    def _take(self) -> _Connection | None:
        now = asyncio.get_running_loop().time()
        idle = self._idle
        while idle:
            conn = idle.pop()
            if self._usable(conn, now):
                return conn
            conn.close()
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout):
                _, conn = await loop.create_connection(
                    _Connection, self._host, self._port, ssl=self._ssl,
                    server_hostname=self._host if self._ssl is not None else None)
        except TimeoutError as exc:
            timer = self._connect_timeout
            raise map_upstream_exception(exc, headers_received=False, waited=None if (
                timer is None) else Waited("connect", timer)) from None
        return conn

    async def post(self, path: str, headers: Iterable[tuple[str, str]],
                   body: bytes) -> UpstreamResponse:
        """Send ``POST path`` with ``body`` and wait for the response head; see the module
        docstring. ``headers`` must not carry ``Host`` or ``Content-Length``."""
        head_bytes = request_head("POST", self._prefix + path, self._authority, headers,
                                  len(body))
        conn = self._take()
        if conn is not None:
            try:
                return await self._send(conn, head_bytes, body)
            except _Unanswered:
                pass  # the upstream closed it idle: it never read the request
            self._on_retry()
        try:
            return await self._send(await self._connect(), head_bytes, body)
        except _Unanswered as exc:
            raise Truncated(str(exc)) from None

    async def _send(self, conn: _Connection, head_bytes: bytes,
                    body: bytes) -> UpstreamResponse:
        """Write the request on ``conn`` and wait for the response head."""
        try:
            assert conn.transport is not None
            conn.transport.writelines((head_bytes, body))
            reader = ResponseReader()
            head = await _head(conn, reader)
            pending = reader.body(b"")
        except BaseException:
            conn.close()
            raise
        return UpstreamResponse(self, conn, reader, head, pending)

    def close(self) -> None:
        """Close every idle connection and stop the idle timer (at shutdown)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._idle:
            self._idle.pop().close()


class _Unanswered(Truncated):
    """The connection closed before any byte of the response arrived."""


async def _head(conn: _Connection, reader: ResponseReader) -> ResponseHead:
    """Read from ``conn`` until ``reader`` has the response head. Raises
    :class:`_Unanswered` when the connection closes before any byte, and
    :class:`~sidecar.codecs.http1.Truncated` when it closes in the middle of the head."""
    answered = False
    while True:
        data = await conn.read()
        if not data:
            if not answered:
                raise _Unanswered("upstream closed the connection before answering")
            raise Truncated("upstream closed the connection before answering")
        answered = True
        head = reader.head(data)
        if head is not None:
            return head
