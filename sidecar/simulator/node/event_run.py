"""One generation served as a stream of an API's named events (the agent APIs), or run to
its end; and the steps such routes share before it (fault header, body, replay trace). It
awaits and writes to the client; what the bytes are is decided by a :class:`Sink` (pure
encoders underneath).

Generation is the chat route's: the same scripted ``sim-*`` models, thinking switches,
budgets, pacing and metrics (``vllm:num_requests_running``, ``generation_tokens_total``,
``request_success_total`` count these requests), and the same disconnect bound: the
transport is checked before every write and at every engine step (at most 0.05 s apart),
so a client that goes away stops generation and is counted in
``sim:disconnected_requests_total``, not as a success.

Faults (``X-Sim-Fault``) mean here what they mean on chat: ``error-mid-stream`` ends the
stream the way the API's sink says, ``no-done`` leaves out the stream's last event, and
counts (``X-Sim-Fault-After``) are text events.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass
from typing import Protocol, TypeVar

import orjson
from aiohttp import web

from sidecar.simulator.common.errors import ApiError, ClientGoneError
from sidecar.simulator.common.validation import BodyValidationError, FieldError
from sidecar.simulator.engine.behaviours import Trace
from sidecar.simulator.engine.faults import (
    INVALID_SSE,
    Fault,
    FaultHeaderError,
    FaultKind,
    parse_fault,
)
from sidecar.simulator.engine.generation import Channel, Mode, Token, generate
from sidecar.simulator.engine.job import Job, Timings
from sidecar.simulator.node.metrics import Accounting
from sidecar.simulator.node.pacing import Pacer, client_gone, wait_or_gone
from sidecar.simulator.node.state import TRACE_HEADER, Node

_T = TypeVar("_T")
_THINKING_MODES = (Mode.THINK, Mode.THINK_PREFILLED)


@dataclass(slots=True)
class Whole:
    """A non-streaming generation's outcome."""

    reasoning: str
    content: str
    finish_reason: str | None
    completion_tokens: int
    reasoning_tokens: int
    failed: bool = False


class Sink(Protocol):
    """What :class:`EventRun` needs from an API's encoder (each agent API's routes have
    one)."""

    def opening(self, job: Job) -> bytes:
        """Bytes sent as soon as the stream opens."""

    def first_step(self, job: Job) -> bytes:
        """Bytes sent when the first engine step produces output."""

    def token(self, token: Token) -> bytes:
        """The events of one token (empty for invisible ones)."""

    def ending(self, job: Job, last: Token | None, *, final: bool,
               timings: Timings) -> bytes:
        """The closing events (``final=False``: without the last one)."""

    def failure(self, job: Job, last: Token | None) -> tuple[bytes, bool]:
        """The bytes of an in-stream failure and whether the connection is then cut."""


class EventRun:
    """One agent-API generation being served (one choice; the chat route's engine)."""

    def __init__(self, node: Node, request: web.Request, job: Job, fault: Fault | None,
                 trace: Trace | None, stream_headers: dict[str, str],
                 json_headers: dict[str, str]) -> None:
        self.node = node
        self.request = request
        self.job = job
        self.fault = fault
        self.stream_headers = stream_headers
        self.json_headers = json_headers
        self.accounting = Accounting(node.metrics, job.model)
        self.sent = 0
        self.resp: web.StreamResponse | None = None
        script = node.behaviours.script(job.model, key=job.prompt, choice=0, trace=trace)
        # sim-stall stalls while thinking; with thinking off it answers like the others.
        self.stall_after = script.stall_after if job.spec.mode in _THINKING_MODES else None
        self.tokens: Iterator[Token] = generate(script, job.spec)
        self.started = time.monotonic()
        self.first_token_at: float | None = None

    def _is(self, kind: FaultKind) -> bool:
        return self.fault is not None and self.fault.kind is kind

    def _timings(self) -> Timings:
        now = time.monotonic()
        first = self.first_token_at if self.first_token_at is not None else now
        return Timings(round((first - self.started) * 1000, 3), round((now - first) * 1000, 3))

    async def _write(self, data: bytes) -> None:
        if not data:
            return
        if self.resp is None:
            raise RuntimeError("write before the stream was opened")
        if client_gone(self.request):
            raise ClientGoneError
        await self.resp.write(data)

    async def _abort(self) -> None:
        """Hand every written byte to the OS (bounded), then cut the connection."""
        transport = self.request.transport
        for _ in range(200):
            if transport is None or transport.is_closing() or (
                    transport.get_write_buffer_size() == 0):
                break
            await asyncio.sleep(0.005)
        if transport is not None:
            transport.abort()

    async def _guarded(self, work: Awaitable[_T]) -> _T | web.StreamResponse:
        """Run ``work`` with the request counted as running; a client that goes away ends
        it (counted as a disconnect) with whatever response was already started."""
        self.accounting.start(self.job)
        gone = False
        try:
            return await work
        except (ClientGoneError, ConnectionError):
            gone = True
            return self.resp if self.resp is not None else web.Response(status=499)
        except asyncio.CancelledError:
            gone = True
            raise
        finally:
            self.accounting.end(disconnected=gone)

    async def stream(self, sink: Sink) -> web.StreamResponse:
        """Serve the generation as a stream of ``sink``'s events."""
        return await self._guarded(self._stream(sink))

    async def whole(self) -> Whole | web.StreamResponse:
        """Generate to the end; a response instead of a result means the run is over."""
        return await self._guarded(self._whole())

    async def _open(self) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers=self.stream_headers)
        resp.enable_chunked_encoding()
        await resp.prepare(self.request)
        return resp

    async def _stream(self, sink: Sink) -> web.StreamResponse:
        self.resp = await self._open()
        if self._is(FaultKind.INVALID_SSE):
            await self._write(INVALID_SSE)
            await self.resp.write_eof()
            return self.resp
        await self._write(sink.opening(self.job))
        if self._is(FaultKind.SLOW_FIRST_TOKEN) and self.fault is not None:
            await wait_or_gone(self.request, self.fault.delay)
        pacer = Pacer(self.request, self.node.config.tokens_per_second)
        last: Token | None = None
        first = True
        for token in self.tokens:
            if first:
                await self._write(sink.first_step(self.job))
                self.first_token_at = time.monotonic()
                first = False
            self.accounting.token(token)
            last = token
            data = sink.token(token)
            if data:
                await self._write(data)
                stop = await self._after_event()
                if stop == "error":
                    self.accounting.fail()
                    tail, abort = sink.failure(self.job, last)
                    await self._write(tail)
                    if abort:
                        await self._abort()
                        return self.resp
                    await self.resp.write_eof()
                    return self.resp
                if stop == "cut":
                    await self.resp.write_eof()
                    return self.resp
            if token.finish_reason is not None:
                break
            await pacer.step()
        if first:  # nothing was generated (max_tokens already reached)
            await self._write(sink.first_step(self.job))
        final = not self._is(FaultKind.NO_DONE)
        await self._write(sink.ending(self.job, last, final=final, timings=self._timings()))
        await self.resp.write_eof()
        return self.resp

    async def _after_event(self) -> str | None:
        """Apply stalls and mid-stream faults after a text event; ``"error"`` or ``"cut"``
        ends the stream."""
        self.sent += 1
        if self.stall_after is not None and self.sent >= self.stall_after:
            await wait_or_gone(self.request, None)
        fault = self.fault
        if fault is None or self.sent < fault.after:
            return None
        if fault.kind is FaultKind.RESET_MID_STREAM:
            await self._abort()
            raise ClientGoneError
        if fault.kind is FaultKind.STALL_MID_STREAM:
            await wait_or_gone(self.request, None)
        if fault.kind is FaultKind.ERROR_MID_STREAM:
            return "error"
        if fault.kind is FaultKind.NO_DONE and fault.after_given:
            return "cut"
        return None

    async def _whole(self) -> Whole | web.StreamResponse:
        if self._is(FaultKind.SLOW_FIRST_TOKEN) and self.fault is not None:
            await wait_or_gone(self.request, self.fault.delay)
        pacer = Pacer(self.request, self.node.config.tokens_per_second)
        texts: dict[Channel, list[str]] = {Channel.REASONING: [], Channel.CONTENT: []}
        last: Token | None = None
        for token in self.tokens:
            self.accounting.token(token)
            last = token
            if token.channel is not Channel.SPECIAL and token.text:
                texts[token.channel].append(token.text)
                self.sent += 1
                if self.stall_after is not None and self.sent >= self.stall_after:
                    await wait_or_gone(self.request, None)
                if self.fault is not None and self.sent >= self.fault.after:
                    if self.fault.kind is FaultKind.ERROR_MID_STREAM:
                        self.accounting.fail()
                        return Whole("", "", None, 0, 0, failed=True)
                    if self.fault.kind is FaultKind.RESET_MID_STREAM:
                        await self._abort()
                        raise ClientGoneError
                    if self.fault.kind is FaultKind.STALL_MID_STREAM:
                        await wait_or_gone(self.request, None)
            if token.finish_reason is not None:
                break
            await pacer.step()
        if self._is(FaultKind.INVALID_SSE):
            return web.Response(status=200, body=INVALID_SSE, headers=self.json_headers)
        return Whole("".join(texts[Channel.REASONING]), "".join(texts[Channel.CONTENT]),
                      last.finish_reason if last else None,
                      last.completion_tokens if last else 0,
                      last.reasoning_tokens if last else 0)


# ------------------------------------------------------------- what the routes share


def json_answer(body: bytes, status: int, headers: dict[str, str]) -> web.Response:
    """A JSON body with the given status and headers."""
    return web.Response(status=status, body=body, headers=headers)


async def read_body(request: web.Request) -> object:
    """The JSON body (:class:`BodyValidationError` when it does not parse, as vLLM's
    request models report it)."""
    raw = await request.read()
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        # ⚠ vLLM reports pydantic's json_invalid with the parser's position; not modelled.
        raise BodyValidationError([FieldError("json_invalid", "body", "JSON decode error",
                                              {}, {"error": str(exc)})]) from None


def replay_trace(node: Node, request: web.Request, model: str) -> Trace | None:
    """The replay trace ``X-Sim-Trace`` picks for ``sim-replay`` (raises :class:`ApiError`)."""
    selector = request.headers.get(TRACE_HEADER)
    if selector is None or node.behaviours.resolve(model) != "sim-replay":
        return None
    try:
        return node.behaviours.replay_trace(selector)
    except LookupError as exc:
        raise ApiError(404, str(exc), "NotFoundError", TRACE_HEADER) from None


def fault_of(request: web.Request) -> Fault | None:
    """The request's fault (raises :class:`ApiError` for a header it cannot read)."""
    try:
        return parse_fault(request.headers)
    except FaultHeaderError as exc:
        raise ApiError(400, str(exc), param="X-Sim-Fault") from None


async def reset(request: web.Request) -> web.Response:
    """``reset-before-headers``: read the body, then cut the connection unanswered."""
    await request.read()
    if request.transport is not None:
        request.transport.abort()
    return web.Response(status=499)
