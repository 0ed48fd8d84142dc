"""The read loop of one watched upstream attempt: upstream bytes through the attempt's
decoder into the client's sink, with the timers that watch the silences.

:func:`pump` sends the attempt's body on the watched requests' pool
(``sidecar.net.upstream``), waits for the response head within the read timeout, and
then reads: every read goes to ``Attempt.feed`` and what it returns to the sink, until
the stream ends or a verdict stops the attempt. That read loop runs as a task of its
own, so a chunk resumes only its few frames (:func:`_reading`). It returns
:class:`NotStreamed` when the upstream answered with something other than a 200 stream
of the API's type (the runner and the ladder decide what the client gets of it), and
None otherwise.

One deadline serves the clock-driven detectors (stall, wall-clock budget) and the read
timeout: it wakes after ``window`` without bytes (the shorter of the two), then every
``step``, and it is pushed back at most once per ``step`` while bytes arrive, so a
streaming chunk arms no timer. When the attempt stops, the response is closed, not
released: vLLM sees the disconnect and aborts the request.

Errors: what the upstream or the codec raise leaves as an
:class:`~sidecar.errors.UpstreamError` (``sidecar.errors.map_upstream_exception``); a
reset of the client's connection while writing leaves as it is, for the runner to count
as a disconnect.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from sidecar.codecs.http1 import ProtocolError
from sidecar.core.attempt import Attempt
from sidecar.core.exchange import Exchange
from sidecar.errors import UpstreamDisconnected, Waited, map_upstream_exception
from sidecar.net.client import reset_by_client
from sidecar.net.headers import forward_headers
from sidecar.net.sinks import Sink
from sidecar.net.upstream import UpstreamPool, UpstreamResponse

#: Seconds: the deadline is pushed back at most this often while bytes arrive.
STALL_GRANULARITY = 1.0


@dataclass(frozen=True, slots=True)
class NotStreamed:
    """The upstream answered with something other than a 200 event stream of the API's
    type (an error status, usually): its status, headers and whole body."""

    status: int
    headers: Any
    body: bytes


async def pump(pool: UpstreamPool, request: web.Request, ex: Exchange, attempt: Attempt,
               data: bytes, sink: Sink) -> NotStreamed | None:
    """One upstream request of ``ex`` with body ``data``, pumped through ``attempt`` into
    ``sink`` (see the module docstring)."""
    stall = ex.config.detectors.stall_seconds
    read_timeout = ex.config.upstream_read_timeout_seconds or None
    window = min(w for w in (stall, read_timeout, math.inf) if w is not None)
    loop = asyncio.get_running_loop()
    headers_received = False
    try:
        up = await _answer(pool, request, ex, data, read_timeout)
        async with up:
            headers_received = True
            if up.status != 200 or not up.headers.get("Content-Type", "").startswith(
                    ex.api.stream_type):
                answer = NotStreamed(up.status, up.headers, await up.read())
                up.close()  # not reused: what answered with an error gets no next request
                return answer
            ex.upstream_status = up.status
            sink.upstream_headers(up.take_headers())
            try:
                await _reading(_read(up, ex, attempt, sink, window, read_timeout))
            finally:
                attempt.settle()  # what the attempt held back, for its readers
            if attempt.stopped:
                up.close()  # not release(): vLLM must see the disconnect and abort
            elif attempt.truncated:
                raise UpstreamDisconnected("upstream ended the stream before it finished")
    except (TimeoutError, aiohttp.ClientError, OSError, ProtocolError) as exc:
        if reset_by_client(exc, request):
            raise  # a write to a client that went away: the runner counts a disconnect
        if (isinstance(exc, TimeoutError) and headers_received
                and attempt.tick(loop.time()) is not None and attempt.stopped):
            return None
        raise map_upstream_exception(exc, headers_received=headers_received) from None
    return None


async def _read(up: UpstreamResponse, ex: Exchange, attempt: Attempt, sink: Sink,
                window: float, read_timeout: float | None) -> None:
    """Read ``up`` through ``attempt`` into ``sink`` until it ends, a verdict stops it, or
    a silence of ``window`` is noticed (a tick; past ``read_timeout``, a timeout error)."""
    loop = asyncio.get_running_loop()
    step = min(STALL_GRANULARITY, window / 4)
    # No byte came after ``heard_by``; a byte read later moves the deadline to ``window``
    # after the new one: a silence is noticed ``window`` to ``window + step`` after it.
    heard_by = loop.time() + step
    deadline_at = heard_by + window if window < math.inf else None
    # Once the response is open: its own write (``Sink.direct``), one frame less per
    # chunk, and the bytes written through it, added to the sink's count at the end.
    write: Callable[[bytes], Awaitable[None]] | None = None
    sent = 0
    try:
        while True:
            writing = False
            try:
                async with asyncio.timeout_at(deadline_at) as deadline:
                    while True:
                        chunk = await up.readany()
                        now = loop.time()
                        if not chunk:
                            tail = attempt.eof(now)
                            if tail:
                                writing = True
                                await sink.write(tail)
                            break
                        out = attempt.feed(chunk, now)
                        # Neither the read nor what it became stays bound while the next
                        # read waits: an idle stream would hold both (up to a whole
                        # coalesced read each).
                        del chunk
                        if out:
                            writing = True
                            if write is None:
                                await sink.write(out)
                                write = sink.direct()
                            else:
                                sent += len(out)
                                await write(out)
                            writing = False
                        del out
                        if attempt.done and ex.client_stream:
                            ex.delivered = True  # the client has its stream's end
                        # ``stopped`` is a property: no call while there is no verdict.
                        if attempt.verdict is not None and attempt.stopped:
                            break
                        if deadline_at is not None and now > heard_by:
                            heard_by = now + step
                            deadline_at = heard_by + window
                            deadline.reschedule(deadline_at)
                break
            except TimeoutError as exc:
                if not deadline.expired():
                    raise  # not the deadline's: a timeout from further down
                now = loop.time()
                if writing:
                    # A client slow to take bytes held the write past the deadline (the
                    # bytes are in the transport already): upstream is not silent,
                    # nothing was read meanwhile.
                    heard_by = now + step
                    deadline_at = heard_by + window
                    continue
                if read_timeout is not None and now - heard_by >= read_timeout:
                    raise map_upstream_exception(exc, headers_received=True, waited=Waited(
                        "silence", read_timeout)) from None
                if attempt.tick(now) is not None and attempt.stopped:
                    break
                deadline_at = now + step
    finally:
        sink.bytes_sent += sent


async def _reading(read: Coroutine[Any, Any, None]) -> None:
    """Run the read loop ``read`` as a task of its own and wait for it. A read resumes
    its task's whole chain of coroutines, from aiohttp's request handler down to the
    socket read: in a task of its own, the read loop is that chain's top, and each chunk
    resumes three frames instead of ten. A cancellation of the handler (the client went
    away) cancels the read loop, and reaches the handler once the loop has ended;
    the loop's exceptions reach the handler as they are."""
    await asyncio.get_running_loop().create_task(read)


async def _answer(pool: UpstreamPool, request: web.Request, ex: Exchange, data: bytes,
                  read_timeout: float | None) -> UpstreamResponse:
    """Send the attempt and wait for the upstream's answer head within ``read_timeout``,
    as aiohttp's ``sock_read`` would."""
    try:
        async with asyncio.timeout(read_timeout):
            # The headers are built in the call: the pump's frame lives as long as the
            # stream, and does not keep them.
            return await pool.post(ex.api.path, upstream_headers(request), data)
    except TimeoutError as exc:  # (without a read timeout: the connect timer's)
        raise map_upstream_exception(exc, headers_received=False, waited=None if (
            read_timeout is None) else Waited("head", read_timeout)) from None


def upstream_headers(request: web.Request) -> list[tuple[str, str]]:
    """The client's headers as sent upstream with a watched request's JSON body (hop-by-hop
    ones, ``Accept-Encoding`` and the client's ``Content-Type`` left out)."""
    headers = forward_headers(request.headers, drop=("accept-encoding", "content-type"))
    headers["Content-Type"] = "application/json"
    return list(headers.items())
