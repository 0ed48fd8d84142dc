"""Ollama's native API routes on the simulated node (``dialect="ollama"`` only):
``POST /api/chat``, ``POST /api/generate`` (NDJSON), ``GET /api/version`` and
``GET /api/tags``. Handlers and the run that streams lines; reading a body
(:mod:`.request`) and the lines themselves (:mod:`.lines`) are pure.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import orjson
from aiohttp import web

from sidecar.simulator.common.errors import ApiError, ClientGoneError
from sidecar.simulator.engine.faults import FaultHeaderError, FaultKind, parse_fault
from sidecar.simulator.engine.generation import Channel, Token, generate
from sidecar.simulator.engine.job import Job
from sidecar.simulator.node.metrics import Accounting
from sidecar.simulator.node.pacing import Pacer
from sidecar.simulator.node.state import NODE_KEY
from sidecar.simulator.ollama.lines import (
    JSON_HEADERS,
    MID_STREAM_ERROR,
    NDJSON_HEADERS,
    error_body,
    final,
    line,
    tags_body,
    version_body,
)
from sidecar.simulator.ollama.request import parse_native


def add_routes(app: web.Application, dialect: str) -> None:
    """Serve Ollama's native API when the node speaks as Ollama."""
    if dialect != "ollama":
        return
    app.router.add_get("/api/version", version_route)
    app.router.add_get("/api/tags", tags_route)
    app.router.add_post("/api/chat", chat_route)
    app.router.add_post("/api/generate", generate_route)


def _error(status: int, message: str) -> web.Response:
    return web.Response(status=status, body=error_body(message), headers=JSON_HEADERS)


class _NativeRun:
    """One native generation request being served."""

    def __init__(self, request: web.Request, job: Job, body: dict[str, Any], *,
                 chat: bool) -> None:
        self.request = request
        self.node = request.app[NODE_KEY]
        self.job = job
        self.chat = chat
        self.model = str(body.get("model"))
        self.started = time.monotonic_ns()

    def _line(self, thinking: str, content: str) -> dict[str, Any]:
        return line(self.model, chat=self.chat, now_ns=time.time_ns(), thinking=thinking,
                    content=content)

    def _final(self, last: Token, thinking: str = "", content: str = "") -> dict[str, Any]:
        return final(self.model, last, chat=self.chat, now_ns=time.time_ns(),
                     elapsed_ns=time.monotonic_ns() - self.started, prompt=self.job.prompt,
                     prompt_tokens=self.job.prompt_tokens, thinking=thinking, content=content)

    def _tokens(self) -> Iterator[Token]:
        script = self.node.behaviours.script(self.job.model, key=self.job.prompt, choice=0)
        return generate(script, self.job.spec)

    async def stream(self, error_after: int | None) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers=NDJSON_HEADERS)
        resp.enable_chunked_encoding()
        await resp.prepare(self.request)
        pacer = Pacer(self.request, self.node.config.tokens_per_second)
        accounting = Accounting(self.node.metrics, self.job.model)
        accounting.start(self.job)
        sent = 0
        gone = False
        try:
            for token in self._tokens():
                accounting.token(token)
                if token.channel is not Channel.SPECIAL:
                    reasoning = token.channel is Channel.REASONING
                    out = self._line(token.text if reasoning else "",
                                     "" if reasoning else token.text)
                    out["done"] = False
                    await resp.write(orjson.dumps(out) + b"\n")
                    sent += 1
                    if error_after is not None and sent >= error_after:
                        accounting.fail()
                        await resp.write(MID_STREAM_ERROR)
                        await resp.write_eof()
                        return resp
                if token.finish_reason is not None:
                    await resp.write(orjson.dumps(self._final(token)) + b"\n")
                    break
                await pacer.step()
            await resp.write_eof()
        except (ClientGoneError, ConnectionError):
            gone = True
        finally:
            accounting.end(disconnected=gone)
        return resp

    async def whole(self) -> web.StreamResponse:
        pacer = Pacer(self.request, self.node.config.tokens_per_second)
        accounting = Accounting(self.node.metrics, self.job.model)
        accounting.start(self.job)
        texts: dict[Channel, list[str]] = {Channel.REASONING: [], Channel.CONTENT: []}
        last: Token | None = None
        gone = False
        try:
            for token in self._tokens():
                accounting.token(token)
                last = token
                if token.channel is not Channel.SPECIAL:
                    texts[token.channel].append(token.text)
                if token.finish_reason is not None:
                    break
                await pacer.step()
        except (ClientGoneError, ConnectionError):
            gone = True
            return web.Response(status=499)
        finally:
            accounting.end(disconnected=gone)
        assert last is not None
        body = self._final(last, "".join(texts[Channel.REASONING]),
                           "".join(texts[Channel.CONTENT]))
        return web.Response(body=orjson.dumps(body), headers=JSON_HEADERS)


async def _native(request: web.Request, *, chat: bool) -> web.StreamResponse:
    node = request.app[NODE_KEY]
    try:
        fault = parse_fault(request.headers)
    except FaultHeaderError as exc:
        return _error(400, str(exc))
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        return _error(400, "invalid character in request body")
    if not isinstance(body, dict):
        return _error(400, "invalid request body")
    model = body.get("model")
    if not isinstance(model, str) or not node.behaviours.knows(model):
        return _error(404, f'model "{model}" not found, try pulling it first')
    try:
        job = parse_native(body, chat=chat, known=node.behaviours.names,
                           max_model_len=node.config.max_model_len)
    except ApiError as err:
        return _error(err.status, err.message)
    if fault is not None and fault.kind is FaultKind.HTTP_500:
        return _error(500, "llama runner process has terminated")
    run = _NativeRun(request, job, body, chat=chat)
    if body.get("stream", True) is False:
        return await run.whole()
    error_after = (fault.after if fault is not None and fault.kind is FaultKind.ERROR_MID_STREAM
                   else None)
    return await run.stream(error_after)


async def chat_route(request: web.Request) -> web.StreamResponse:
    """``POST /api/chat``."""
    return await _native(request, chat=True)


async def generate_route(request: web.Request) -> web.StreamResponse:
    """``POST /api/generate``."""
    return await _native(request, chat=False)


async def version_route(request: web.Request) -> web.Response:
    """``GET /api/version``."""
    return web.Response(body=version_body(), headers=JSON_HEADERS)


async def tags_route(request: web.Request) -> web.Response:
    """``GET /api/tags``: the simulated models, as Ollama lists pulled models."""
    names = request.app[NODE_KEY].behaviours.names
    return web.Response(body=tags_body(names, time.time_ns()), headers=JSON_HEADERS)
