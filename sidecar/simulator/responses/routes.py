"""The OpenAI Responses API routes of the simulated node: ``POST /v1/responses`` where the
server has it (not SGLang: its wire format is neither documented nor captured), and on
vLLM ``GET /v1/responses/{id}`` and ``POST …/cancel``, which a vLLM without its store
answers 404. Handlers only: reading a body (:mod:`.request`) and encoding
(:mod:`.stream`, :mod:`.vllm`, :mod:`.servers`) are pure; generation and its I/O run in
:mod:`~sidecar.simulator.node.event_run`.

Faults (``X-Sim-Fault``) as vLLM behaves on this endpoint: on ``error-mid-stream`` the
connection just ends without ``response.completed``; ``no-done`` leaves out
``response.completed``.
"""

from __future__ import annotations

import time

from aiohttp import web

from sidecar.simulator.common.errors import ApiError, in_dialect
from sidecar.simulator.common.thinking import thinking_off_prefix
from sidecar.simulator.common.validation import BodyValidationError
from sidecar.simulator.engine.faults import FaultKind
from sidecar.simulator.engine.generation import Mode, Token
from sidecar.simulator.engine.job import Job, Timings
from sidecar.simulator.node.event_run import (
    EventRun,
    Whole,
    fault_of,
    json_answer,
    read_body,
    replay_trace,
    reset,
)
from sidecar.simulator.node.state import NODE_KEY, RngDraw
from sidecar.simulator.responses.request import not_found, parse_responses
from sidecar.simulator.responses.servers import RESPONSES_WIRES
from sidecar.simulator.responses.stream import (
    ResponseHead,
    ResponsesStream,
    ResponsesWire,
    ResponseUsage,
)

_INTERNAL = "Internal server error"
WIRE_KEY = web.AppKey("sim_responses_wire", ResponsesWire)


def add_routes(app: web.Application, dialect: str) -> None:
    """Serve the Responses API the way ``dialect``'s server does, if it has one (see
    :mod:`.vllm` and :mod:`.servers` for which parts are verified against real bytes)."""
    wire = RESPONSES_WIRES.get(dialect)
    if wire is None:
        return
    app[WIRE_KEY] = wire()
    app.router.add_post("/v1/responses", responses_route)
    if dialect == "vllm":
        app.router.add_get("/v1/responses/{response_id}", response_by_id_route)
        app.router.add_post("/v1/responses/{response_id}/cancel", response_by_id_route)


async def responses_route(request: web.Request) -> web.StreamResponse:
    """``POST /v1/responses``."""
    node, wire = request.app[NODE_KEY], request.app[WIRE_KEY]
    draw = RngDraw(node.rng)
    default_model = node.config.served_model_name or node.behaviours.names[0]
    body: object = None
    try:
        fault = fault_of(request)
        if fault is not None and fault.kind is FaultKind.RESET_BEFORE_HEADERS:
            return await reset(request)
        body = await read_body(request)
        parsed = parse_responses(body, dialect=node.dialect, known=node.behaviours.names,
                                 default_model=default_model,
                                 max_model_len=node.config.max_model_len)
        trace = replay_trace(node, request, parsed.job.model)
    except BodyValidationError as exc:
        return json_answer(wire.validation_body(exc.message, exc.param), 400, wire.json_headers)
    except ApiError as err:
        err = in_dialect(node.dialect, err, body)
        return json_answer(wire.error_body(err.status, err.err_type, err.message, err.param),
                     err.status, wire.json_headers)
    if fault is not None and fault.kind is FaultKind.HTTP_500:
        return json_answer(wire.error_body(500, "InternalServerError", _INTERNAL, None), 500,
                     wire.json_headers)
    job = parsed.job
    assert isinstance(body, dict)
    head = ResponseHead(wire.response_id(draw, parsed.response_id), int(time.time()),
                        job.model, parsed.echo, body)
    prefix = thinking_off_prefix(node.dialect) if job.spec.mode is Mode.NO_THINK else ""
    run = EventRun(node, request, job, fault, trace, wire.stream_headers, wire.json_headers)
    if job.stream:
        stream = ResponsesStream(wire, head, draw, include_reasoning=parsed.include_reasoning,
                                 leading_text=prefix)
        return await run.stream(_ResponsesSink(stream, wire))
    result = await run.whole()
    if not isinstance(result, Whole):
        return result
    if result.failed:
        return json_answer(wire.error_body(500, "InternalServerError", _INTERNAL, None), 500,
                     wire.json_headers)
    content = (prefix + result.content) if result.content else result.content
    reasoning = result.reasoning if parsed.include_reasoning else ""
    usage = ResponseUsage(job.prompt_tokens, result.completion_tokens, result.reasoning_tokens)
    return json_answer(wire.body(head, result.finish_reason, reasoning or None, content or None,
                           usage, draw, int(time.time())), 200, wire.json_headers)


async def response_by_id_route(request: web.Request) -> web.Response:
    """``GET /v1/responses/{id}`` and ``POST /v1/responses/{id}/cancel``: vLLM without
    ``VLLM_ENABLE_RESPONSES_API_STORE`` holds no responses, so every id is unknown."""
    wire = request.app[WIRE_KEY]
    err = not_found(request.match_info["response_id"])
    return json_answer(wire.error_body(err.status, err.err_type, err.message, err.param), 404,
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
