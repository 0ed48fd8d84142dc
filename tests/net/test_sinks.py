"""The client sinks, format-neutral: a stream that starts with its first byte, or one body
from the API's fold; errors before and after the response started (real aiohttp server)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web
from aiohttp.test_utils import TestClient

from detectors import Evidence, Verdict
from sidecar.apis.ollama.api import OLLAMA_CHAT
from sidecar.apis.ollama.fold import OllamaFold
from sidecar.apis.openai.api import CHAT
from sidecar.apis.openai.fold import OpenAIFold
from sidecar.config import Config
from sidecar.core.exchange import Exchange
from sidecar.core.wire import WireApi
from sidecar.errors import UpstreamTimeoutError
from sidecar.net.sinks import BodySink, Sink, StreamSink

Client = Callable[[web.Application], Awaitable[TestClient[web.Request, web.Application]]]
VERDICT = Verdict("periodic", "thinking", "loop", Evidence("x", 4, 3), 10, 40)
UPSTREAM = {"Content-Type": "text/event-stream; charset=utf-8", "Connection": "keep-alive",
            "X-Upstream": "vllm"}


def exchange(api: WireApi, *, stream: bool, verdict: bool = False) -> Exchange:
    ex = Exchange(api=api, config=Config(), model="m", mode="enforce", request_id="r",
                  started=0.0, facts=api.facts({"stream": stream}))
    if verdict:
        ex.verdicts.append(VERDICT)
        ex.attempts = 2
    return ex


def app_of(run: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.Application:
    app = web.Application()
    app.router.add_post("/", run)
    return app


async def test_a_stream_starts_with_its_first_byte(aiohttp_client: Client) -> None:
    """The upstream's headers (hop-by-hop ones dropped) go out with the first byte; an
    error after that travels in the stream as the splicer's frames."""
    async def run(request: web.Request) -> web.StreamResponse:
        sink = StreamSink(CHAT, request)
        sink.upstream_headers(UPSTREAM)
        await sink.write(b"data: 1\n\n")
        await sink.fail(UpstreamTimeoutError("late"), b"data: err\n\n")
        return await sink.finish(exchange(CHAT, stream=True))

    client = await aiohttp_client(app_of(run))
    resp = await client.post("/")
    assert resp.status == 200
    assert resp.headers["X-Upstream"] == "vllm"
    assert resp.headers["Content-Type"] == "text/event-stream; charset=utf-8"
    assert await resp.read() == b"data: 1\n\ndata: err\n\n"


async def test_an_error_before_the_first_byte_is_a_status(aiohttp_client: Client) -> None:
    """Before anything was written, an error is a JSON body in the API's own shape with
    the error's status; so is a relayed upstream answer."""
    async def failing(request: web.Request) -> web.StreamResponse:
        api = OLLAMA_CHAT if request.query.get("api") == "ollama" else CHAT
        sink: Sink = StreamSink(api, request)
        await sink.fail(UpstreamTimeoutError("late"), b"never sent")
        return await sink.finish(exchange(api, stream=True))

    async def relaying(request: web.Request) -> web.StreamResponse:
        sink = StreamSink(CHAT, request)
        await sink.relay(404, {"Content-Type": "application/json"}, b'{"error":"no"}')
        return await sink.finish(exchange(CHAT, stream=True))

    app = app_of(failing)
    app.router.add_post("/relay", relaying)
    client = await aiohttp_client(app)
    resp = await client.post("/")
    assert resp.status == 504
    assert orjson.loads(await resp.read())["error"]["type"] == "GatewayTimeoutError"
    resp = await client.post("/?api=ollama")
    assert (resp.status, await resp.read()) == (504, b'{"error":"late"}')
    resp = await client.post("/relay")
    assert (resp.status, await resp.read()) == (404, b'{"error":"no"}')


async def test_a_body_from_the_fold_with_the_runaway_headers(aiohttp_client: Client) -> None:
    """A non-streaming client gets the fold's body as application/json, the upstream's
    other headers, and X-Runaway-* when a cut happened (the action the last cut named)."""
    async def run(request: web.Request) -> web.StreamResponse:
        fold = OpenAIFold("chat")
        fold.add({"id": "c", "created": 1, "model": "m", "choices": [
            {"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]})
        sink = BodySink(CHAT, fold)
        sink.upstream_headers(UPSTREAM)
        await sink.write(b"")
        sink.cut("reissue")
        sink.cut("finish")
        return await sink.finish(exchange(CHAT, stream=False, verdict=True))

    client = await aiohttp_client(app_of(run))
    resp = await client.post("/")
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "application/json"
    assert resp.headers["X-Upstream"] == "vllm"
    assert (resp.headers["X-Runaway-Detector"], resp.headers["X-Runaway-Action"],
            resp.headers["X-Runaway-Attempts"]) == ("periodic", "finish", "2")
    body = orjson.loads(await resp.read())
    assert body["choices"][0]["message"]["content"] == "ok"


async def test_a_folded_error_line_is_a_500(aiohttp_client: Client) -> None:
    """Ollama's body when the stream ended with an error line: a 500 with the error; a
    healthy Ollama body is application/json with charset utf-8, as Ollama sends it."""
    async def run(request: web.Request) -> web.StreamResponse:
        fold = OllamaFold("chat")
        fold.add({"model": "m", "message": {"role": "assistant", "content": "x"}, "done": True})
        if request.query.get("error"):
            fold.add({"error": "gone"})
        return await BodySink(OLLAMA_CHAT, fold).finish(exchange(OLLAMA_CHAT, stream=False))

    client = await aiohttp_client(app_of(run))
    resp = await client.post("/?error=1")
    assert (resp.status, await resp.read()) == (500, b'{"error":"gone"}')
    resp = await client.post("/")
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "application/json; charset=utf-8"
    assert "X-Runaway-Detector" not in resp.headers
