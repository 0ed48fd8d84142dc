"""One watched attempt's read loop: upstream bytes through the attempt into the client's
sink, what it returns for an answer that is no stream, and the silence timer; against
real servers on loopback (an upstream, and a client-facing app that runs the pump)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from detectors import DetectorConfig
from sidecar.apis.openai.api import CHAT
from sidecar.config import Config
from sidecar.core.attempt import AttemptSpec
from sidecar.core.exchange import Exchange
from sidecar.dialects import DIALECTS
from sidecar.errors import UpstreamError
from sidecar.net.pump import NotStreamed, pump
from sidecar.net.sinks import StreamSink
from sidecar.net.upstream import UpstreamPool

ServerFactory = Callable[..., Awaitable[TestServer]]
CHUNK = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
         b'"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}\n\n')
FINISH = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
          b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n')
STREAM = CHUNK + FINISH + b"data: [DONE]\n\n"
REFUSAL = b'{"error":{"message":"bad request","type":"BadRequestError","code":400}}'


async def upstream(request: web.Request) -> web.StreamResponse:
    """``X-Test``: ``stream`` (a whole stream), ``paced`` (the same, its first chunk three
    times, each write a read of its own), ``refuse`` (a 400) or ``silent`` (a head, one
    chunk, then nothing)."""
    await request.read()
    behaviour = request.headers["X-Test"]
    if behaviour == "refuse":
        return web.Response(status=400, body=REFUSAL, content_type="application/json")
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(CHUNK)
    if behaviour == "paced":
        for _ in range(2):
            await asyncio.sleep(0.05)
            await resp.write(CHUNK)
        await asyncio.sleep(0.05)
    if behaviour == "silent":
        await asyncio.sleep(30)
    await resp.write(FINISH + b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


@dataclasses.dataclass
class Pumped:
    """What the client-facing handler saw of each pump it ran."""

    results: list[NotStreamed | UpstreamError | None] = dataclasses.field(default_factory=list)
    #: The sink's count of bytes written, after each pump.
    sent: list[int] = dataclasses.field(default_factory=list)
    #: Per cancelled pump: whether it ended cancelled, and how many read loops still ran.
    cancelled: list[bool] = dataclasses.field(default_factory=list)
    reading_after: list[int] = dataclasses.field(default_factory=list)


@pytest.fixture
async def rig(aiohttp_server: ServerFactory) -> AsyncIterator[tuple[str, Pumped, UpstreamPool]]:
    """A client-facing server whose handler pumps one attempt from the upstream server."""
    up = await aiohttp_server(_app(upstream))
    pool = UpstreamPool(str(up.make_url("")).rstrip("/"), 5.0, 4.0)
    cfg = Config(upstream_read_timeout_seconds=0.3)
    pumped = Pumped()

    async def handler(request: web.Request) -> web.StreamResponse:
        facts = CHAT.facts({"model": "m", "stream": True, "messages": []})
        loop = asyncio.get_running_loop()
        ex = Exchange(api=CHAT, config=cfg, model="m", mode="enforce", request_id="r",
                      started=loop.time(), facts=facts)
        opened = CHAT.open(facts, DIALECTS["vllm"], request_id="r", model="m")
        attempt = opened.attempt(AttemptSpec(number=0, detectors=DetectorConfig(),
                                             started_at=loop.time(),
                                             exchange_started=ex.started))
        sink = StreamSink(CHAT, request)
        if request.headers.get("X-Cancel"):  # cancel the pump once the client has a byte
            running = asyncio.create_task(pump(pool, request, ex, attempt, b"{}", sink))
            while not sink.bytes_sent:
                await asyncio.sleep(0.01)
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
            pumped.cancelled.append(running.cancelled())
            pumped.reading_after.append(len([
                t for t in asyncio.all_tasks()
                if getattr(t.get_coro(), "__name__", "") == "_read"]))
            return await sink.finish(ex)
        try:
            pumped.results.append(await pump(pool, request, ex, attempt, b"{}", sink))
        except UpstreamError as err:
            pumped.results.append(err)
        pumped.sent.append(sink.bytes_sent)
        return await sink.finish(ex)

    front = await aiohttp_server(_app(handler))
    yield str(front.make_url("/v1/chat/completions")), pumped, pool
    pool.close()


def _app(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.Application:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    return app


async def _post(url: str, behaviour: str, *, cancel: bool = False) -> tuple[int, bytes]:
    headers = {"X-Test": behaviour, **({"X-Cancel": "1"} if cancel else {})}
    async with aiohttp.ClientSession() as s, s.post(url, data=b"{}", headers=headers) as r:
        return r.status, await r.read()


async def test_a_stream_is_pumped_to_the_client(rig: tuple[str, Pumped, UpstreamPool]) -> None:
    """Every upstream byte reaches the client, and the pump returns nothing to decide."""
    url, pumped, pool = rig
    assert await _post(url, "stream") == (200, STREAM)
    assert pumped.results == [None]
    assert pool.idle == 1  # read to its end: the connection is kept for the next request


async def test_the_sink_counts_every_byte_written(
        rig: tuple[str, Pumped, UpstreamPool]) -> None:
    """The first chunk goes through the sink, which opens the response, and the later
    ones straight to the response (``Sink.direct``): the sink's count (the access log's
    ``bytes``) is still every byte the client got, also when the attempt fails."""
    url, pumped, _ = rig
    body = CHUNK * 3 + FINISH + b"data: [DONE]\n\n"
    assert await _post(url, "paced") == (200, body)
    assert await _post(url, "silent") == (200, CHUNK)
    assert pumped.sent == [len(body), len(CHUNK)]


async def test_an_answer_that_is_no_stream_is_returned(
        rig: tuple[str, Pumped, UpstreamPool]) -> None:
    """An error status is no exception: the pump returns it whole, writes nothing, and
    does not keep the connection."""
    url, pumped, pool = rig
    status, _ = await _post(url, "refuse")
    assert status == 200  # (this handler only finishes the sink: nothing was written)
    [answer] = pumped.results
    assert isinstance(answer, NotStreamed)
    assert (answer.status, answer.body) == (400, REFUSAL)
    assert answer.headers["Content-Type"].startswith("application/json")
    assert pool.idle == 0


async def test_a_silent_upstream_times_out(rig: tuple[str, Pumped, UpstreamPool]) -> None:
    """No byte for the read timeout: an upstream timeout error naming it."""
    url, pumped, _ = rig
    status, body = await _post(url, "silent")
    assert (status, body) == (200, CHUNK)
    [err] = pumped.results
    assert isinstance(err, UpstreamError)
    assert (err.kind, str(err)) == ("timeout", "no bytes from upstream for 0.3 s")


async def test_a_cancelled_pump_ends_its_read_loop_first(
        rig: tuple[str, Pumped, UpstreamPool]) -> None:
    """The read loop runs as a task of its own; a cancellation of the pump (the client
    went away) reaches the caller only once that loop has ended, and the upstream
    connection it read is closed, not kept for another request."""
    url, pumped, pool = rig
    assert await _post(url, "silent", cancel=True) == (200, CHUNK)
    assert pumped.cancelled == [True]
    assert pumped.reading_after == [0]
    assert pumped.results == []
    assert pool.idle == 0
