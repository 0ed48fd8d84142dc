"""The coding-agent routes of the simulated node: Anthropic ``/v1/messages`` (and
``/v1/messages/count_tokens``) and OpenAI ``/v1/responses`` (with ``GET`` and ``cancel``
by id, which a vLLM without its store answers 404). The I/O of these APIs lives here;
validation (:mod:`~sidecar.simulator.agent_requests`) and encoding
(:mod:`~sidecar.simulator.wire_messages`, :mod:`~sidecar.simulator.wire_responses`) are
pure.

Generation is the chat route's: the same scripted ``sim-*`` models, thinking switches,
budgets, pacing and metrics (``vllm:num_requests_running``, ``generation_tokens_total``,
``request_success_total`` count these requests), and the same disconnect bound: the
transport is checked before every write and at every engine step (at most 0.05 s apart),
so a client that goes away stops generation and is counted in
``sim:disconnected_requests_total``, not as a success.

Faults (``X-Sim-Fault``) mean here what they mean on chat, with vLLM's behaviour on these
endpoints: ``error-mid-stream`` is a lone ``event: error`` carrying pydantic's text on
messages, and on responses the connection just ends without ``response.completed``;
``no-done`` leaves out the stream's last event (``message_stop``,
``response.completed``); counts (``X-Sim-Fault-After``) are text events.
"""

from __future__ import annotations

import asyncio
import random
import string
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from aiohttp import web

from sidecar.simulator.agent_requests import (
    BodyValidationError,
    FieldError,
    check_messages,
    count_tokens,
    messages_chat,
    not_found,
    parse_messages,
    parse_responses,
)
from sidecar.simulator.behaviours import Trace
from sidecar.simulator.faults import Fault, FaultHeaderError, FaultKind, parse_fault
from sidecar.simulator.generation import Channel, Mode, Token, generate
from sidecar.simulator.node import NODE_KEY, ClientGoneError, Node
from sidecar.simulator.requests import ApiError, Job
from sidecar.simulator.runtime import Accounting, Pacer, client_gone, wait_or_gone
from sidecar.simulator.streaming import _INVALID_SSE, TRACE_HEADER
from sidecar.simulator.wire_messages import (
    MESSAGES_WIRES,
    MessagesStream,
    MessagesWire,
)
from sidecar.simulator.wire_responses import (
    RESPONSES_WIRES,
    ResponseHead,
    ResponsesStream,
    ResponsesWire,
    ResponseUsage,
    Timings,
)

_THINKING_MODES = (Mode.THINK, Mode.THINK_PREFILLED)
_ALNUM = string.ascii_letters + string.digits
_INTERNAL = "Internal server error"


class RngDraw:
    """Ids and signatures from the node's seeded generator (reproducible runs)."""

    __slots__ = ("_rng",)

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def hex(self, digits: int) -> str:
        return f"{self._rng.getrandbits(4 * digits):0{digits}x}"

    def alnum(self, length: int) -> str:
        return "".join(self._rng.choice(_ALNUM) for _ in range(length))

    def number(self, below: int) -> int:
        return self._rng.randrange(below)


@dataclass(frozen=True, slots=True)
class AgentWires:
    """The node's encoders for the two APIs (``responses`` is ``None`` where the server
    has no such endpoint)."""

    dialect: str
    messages: MessagesWire
    responses: ResponsesWire | None
    #: Text put before the first answer text when the template pre-filled an empty think
    #: block: llama.cpp's parser hands the block's trailing "\n\n" to the answer (captured).
    thinking_off_prefix: str


AGENT_KEY = web.AppKey("sim_agent_wires", AgentWires)


def add_agent_routes(app: web.Application, dialect: str) -> None:
    """Serve the agent APIs the way ``dialect``'s server does (see the wire modules for
    which parts are verified against real bytes)."""
    responses_wire = RESPONSES_WIRES.get(dialect)
    app[AGENT_KEY] = AgentWires(
        dialect=dialect,
        messages=MESSAGES_WIRES[dialect](),
        responses=responses_wire() if responses_wire is not None else None,
        thinking_off_prefix="\n\n" if dialect == "llamacpp" else "",
    )
    app.router.add_post("/v1/messages", messages_route)
    app.router.add_post("/v1/messages/count_tokens", count_tokens_route)
    if responses_wire is not None:
        app.router.add_post("/v1/responses", responses_route)
    if dialect == "vllm":
        app.router.add_get("/v1/responses/{response_id}", response_by_id_route)
        app.router.add_post("/v1/responses/{response_id}/cancel", response_by_id_route)


def _json(body: bytes, status: int, headers: dict[str, str]) -> web.Response:
    return web.Response(status=status, body=body, headers=headers)


async def _read(request: web.Request) -> object:
    raw = await request.read()
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        # ⚠ vLLM reports pydantic's json_invalid with the parser's position; not modelled.
        raise BodyValidationError([FieldError("json_invalid", "body", "JSON decode error",
                                              {}, {"error": str(exc)})]) from None


def _trace(node: Node, request: web.Request, model: str) -> Trace | None:
    """The replay trace ``X-Sim-Trace`` picks for ``sim-replay`` (raises :class:`ApiError`)."""
    selector = request.headers.get(TRACE_HEADER)
    if selector is None or node.behaviours.resolve(model) != "sim-replay":
        return None
    try:
        return node.behaviours.replay_trace(selector)
    except LookupError as exc:
        raise ApiError(404, str(exc), "NotFoundError", TRACE_HEADER) from None


def _fault(request: web.Request) -> Fault | None:
    """The request's fault (raises :class:`ApiError` for a header it cannot read)."""
    try:
        return parse_fault(request.headers)
    except FaultHeaderError as exc:
        raise ApiError(400, str(exc), param="X-Sim-Fault") from None


async def _reset(request: web.Request) -> web.Response:
    await request.read()
    if request.transport is not None:
        request.transport.abort()
    return web.Response(status=499)


def _unknown_model(node: Node, agent: AgentWires, err: ApiError) -> ApiError:
    if agent.dialect == "ollama" and err.status == 404 and err.param == "model":
        model = err.message.split("`")[1] if "`" in err.message else ""
        return ApiError(404, f'model "{model}" not found, try pulling it first')
    return err


# --------------------------------------------------------------------------- messages


async def messages_route(request: web.Request) -> web.StreamResponse:
    """``POST /v1/messages``."""
    node, agent = request.app[NODE_KEY], request.app[AGENT_KEY]
    wire, draw = agent.messages, RngDraw(node.rng)
    try:
        fault = _fault(request)
        if fault is not None and fault.kind is FaultKind.RESET_BEFORE_HEADERS:
            return await _reset(request)
        job = parse_messages(await _read(request), dialect=agent.dialect,
                             known=node.behaviours.names,
                             max_model_len=node.config.max_model_len)
        trace = _trace(node, request, job.model)
    except BodyValidationError as exc:
        return _json(wire.validation_body(exc.message, exc.param, draw), 400, wire.json_headers)
    except ApiError as err:
        err = _unknown_model(node, agent, err)
        return _json(wire.error_body(err.status, err.err_type, err.message, draw), err.status,
                     wire.json_headers)
    if fault is not None and fault.kind is FaultKind.HTTP_500:
        return _json(wire.error_body(500, "InternalServerError", _INTERNAL, draw), 500,
                     wire.json_headers)
    given = request.headers.get("X-Request-Id")
    prefix = agent.thinking_off_prefix if job.spec.mode is Mode.NO_THINK else ""
    stream = MessagesStream(wire, wire.message_id(draw, given), job.model, draw,
                            leading_text=prefix)
    run = _Run(node, request, job, fault, trace, wire.stream_headers, wire.json_headers)
    if job.stream:
        return await run.stream(_MessagesSink(stream, wire))
    result = await run.whole()
    if isinstance(result, web.StreamResponse):
        return result
    if result.failed:
        return _json(wire.error_body(500, "InternalServerError", _INTERNAL, draw), 500,
                     wire.json_headers)
    content = (prefix + result.content) if result.content else result.content
    return _json(wire.body(stream.msg_id, job.model, result.reasoning or None, content or None,
                           result.finish_reason, job.prompt_tokens, result.completion_tokens,
                           draw), 200, wire.json_headers)


async def count_tokens_route(request: web.Request) -> web.Response:
    """``POST /v1/messages/count_tokens``: the rendered prompt's length; nothing runs."""
    node, agent = request.app[NODE_KEY], request.app[AGENT_KEY]
    wire, draw = agent.messages, RngDraw(node.rng)
    try:
        body = await _read(request)
        if agent.dialect == "ollama":
            # ⚠ Ollama estimates (characters / 4) instead of tokenizing (source-read).
            req = check_messages(body, count_tokens=True)
            chars = sum(len(m["role"]) + len(m["content"]) for m in messages_chat(req))
            n = max(chars // 4, 1 if req.messages else 0)
        else:
            n = count_tokens(body, dialect=agent.dialect, known=node.behaviours.names)
    except BodyValidationError as exc:
        return _json(wire.validation_body(exc.message, exc.param, draw), 400, wire.json_headers)
    except ApiError as err:
        err = _unknown_model(node, agent, err)
        return _json(wire.error_body(err.status, err.err_type, err.message, draw), err.status,
                     wire.json_headers)
    return _json(wire.count_tokens_body(n), 200, wire.json_headers)


class _MessagesSink:
    """Writes a generation as Messages API events."""

    def __init__(self, stream: MessagesStream, wire: MessagesWire) -> None:
        self.stream = stream
        self.wire = wire

    def opening(self, job: Job) -> bytes:
        return b""

    def first_step(self, job: Job) -> bytes:
        return self.stream.start(job.prompt_tokens)

    def token(self, token: Token) -> bytes:
        return self.stream.token(token.channel, token.text)

    def ending(self, job: Job, last: Token | None, *, final: bool, timings: Timings) -> bytes:
        out = self.stream.finish(last.finish_reason if last else None, job.prompt_tokens,
                                 last.completion_tokens if last else 0)
        if not final:  # no-done: the stream's last event is left out
            out = out[: len(out) - len(self.wire.message_stop())]
        return out

    def failure(self, job: Job, last: Token | None) -> tuple[bytes, bool]:
        out = self.stream.error()
        if self.wire.finishes_after_error:
            out += self.stream.finish(None, 0, 0)
        return out, False


# -------------------------------------------------------------------------- responses


async def responses_route(request: web.Request) -> web.StreamResponse:
    """``POST /v1/responses``."""
    node, agent = request.app[NODE_KEY], request.app[AGENT_KEY]
    wire = agent.responses
    assert wire is not None
    draw = RngDraw(node.rng)
    default_model = node.config.served_model_name or node.behaviours.names[0]
    try:
        fault = _fault(request)
        if fault is not None and fault.kind is FaultKind.RESET_BEFORE_HEADERS:
            return await _reset(request)
        body = await _read(request)
        parsed = parse_responses(body, dialect=agent.dialect, known=node.behaviours.names,
                                 default_model=default_model,
                                 max_model_len=node.config.max_model_len)
        trace = _trace(node, request, parsed.job.model)
    except BodyValidationError as exc:
        return _json(wire.validation_body(exc.message, exc.param), 400, wire.json_headers)
    except ApiError as err:
        err = _unknown_model(node, agent, err)
        return _json(wire.error_body(err.status, err.err_type, err.message, err.param),
                     err.status, wire.json_headers)
    if fault is not None and fault.kind is FaultKind.HTTP_500:
        return _json(wire.error_body(500, "InternalServerError", _INTERNAL, None), 500,
                     wire.json_headers)
    job = parsed.job
    assert isinstance(body, dict)
    head = ResponseHead(wire.response_id(draw, parsed.response_id), int(time.time()),
                        job.model, parsed.echo, body)
    prefix = agent.thinking_off_prefix if job.spec.mode is Mode.NO_THINK else ""
    run = _Run(node, request, job, fault, trace, wire.stream_headers, wire.json_headers)
    if job.stream:
        stream = ResponsesStream(wire, head, draw, include_reasoning=parsed.include_reasoning,
                                 leading_text=prefix)
        return await run.stream(_ResponsesSink(stream, wire))
    result = await run.whole()
    if isinstance(result, web.StreamResponse):
        return result
    if result.failed:
        return _json(wire.error_body(500, "InternalServerError", _INTERNAL, None), 500,
                     wire.json_headers)
    content = (prefix + result.content) if result.content else result.content
    reasoning = result.reasoning if parsed.include_reasoning else ""
    usage = ResponseUsage(job.prompt_tokens, result.completion_tokens, result.reasoning_tokens)
    return _json(wire.body(head, result.finish_reason, reasoning or None, content or None,
                           usage, draw, int(time.time())), 200, wire.json_headers)


async def response_by_id_route(request: web.Request) -> web.Response:
    """``GET /v1/responses/{id}`` and ``POST /v1/responses/{id}/cancel``: vLLM without
    ``VLLM_ENABLE_RESPONSES_API_STORE`` holds no responses, so every id is unknown."""
    wire = request.app[AGENT_KEY].responses
    assert wire is not None
    err = not_found(request.match_info["response_id"])
    return _json(wire.error_body(err.status, err.err_type, err.message, err.param), 404,
                 wire.json_headers)


class _ResponsesSink:
    """Writes a generation as Responses API events."""

    def __init__(self, stream: ResponsesStream, wire: ResponsesWire) -> None:
        self.stream = stream
        self.wire = wire

    def opening(self, job: Job) -> bytes:
        return self.stream.start()  # sent before the engine runs, as vLLM does

    def first_step(self, job: Job) -> bytes:
        return b""

    def token(self, token: Token) -> bytes:
        return self.stream.token(token.channel, token.text)

    def ending(self, job: Job, last: Token | None, *, final: bool, timings: Timings) -> bytes:
        usage = ResponseUsage(job.prompt_tokens, last.completion_tokens if last else 0,
                              last.reasoning_tokens if last else 0)
        out = self.stream.finish(last.finish_reason if last else None, usage, timings,
                                 int(time.time()))
        if not final:  # no-done: everything but response.completed
            out = out[: out.rfind(b"event: response.completed\n")]
        return out

    def failure(self, job: Job, last: Token | None) -> tuple[bytes, bool]:
        return b"", self.wire.aborts_on_error


# ----------------------------------------------------------------------------- engine


@dataclass(slots=True)
class _Whole:
    """A non-streaming generation's outcome."""

    reasoning: str
    content: str
    finish_reason: str | None
    completion_tokens: int
    reasoning_tokens: int
    failed: bool = False


class _Sink(Protocol):
    """What :class:`_Run` needs from an API's encoder (see the two sinks above)."""

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


class _Run:
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
        self.accounting = Accounting(node, job.model)
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

    async def _guarded(self, body: Any) -> Any:
        self.accounting.start(self.job)
        gone = False
        try:
            return await body
        except (ClientGoneError, ConnectionError):
            gone = True
            return self.resp if self.resp is not None else web.Response(status=499)
        except asyncio.CancelledError:
            gone = True
            raise
        finally:
            self.accounting.end(disconnected=gone)

    async def stream(self, sink: _Sink) -> web.StreamResponse:
        result: web.StreamResponse = await self._guarded(self._stream(sink))
        return result

    async def whole(self) -> _Whole | web.StreamResponse:
        result: _Whole | web.StreamResponse = await self._guarded(self._whole())
        return result

    async def _open(self) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers=self.stream_headers)
        resp.enable_chunked_encoding()
        await resp.prepare(self.request)
        return resp

    async def _stream(self, sink: _Sink) -> web.StreamResponse:
        self.resp = await self._open()
        if self._is(FaultKind.INVALID_SSE):
            await self._write(_INVALID_SSE)
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

    async def _whole(self) -> _Whole | web.StreamResponse:
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
                        return _Whole("", "", None, 0, 0, failed=True)
                    if self.fault.kind is FaultKind.RESET_MID_STREAM:
                        await self._abort()
                        raise ClientGoneError
                    if self.fault.kind is FaultKind.STALL_MID_STREAM:
                        await wait_or_gone(self.request, None)
            if token.finish_reason is not None:
                break
            await pacer.step()
        if self._is(FaultKind.INVALID_SSE):
            return web.Response(status=200, body=_INVALID_SSE, headers=self.json_headers)
        return _Whole("".join(texts[Channel.REASONING]), "".join(texts[Channel.CONTENT]),
                      last.finish_reason if last else None,
                      last.completion_tokens if last else 0,
                      last.reasoning_tokens if last else 0)
