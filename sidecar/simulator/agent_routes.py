"""The coding-agent routes of the simulated node: Anthropic ``/v1/messages`` (and
``/v1/messages/count_tokens``) and OpenAI ``/v1/responses`` (with ``GET`` and ``cancel``
by id, which a vLLM without its store answers 404). Route handlers only: reading a body
(:mod:`~sidecar.simulator.messages_request`, :mod:`~sidecar.simulator.responses_request`)
and encoding (:mod:`~sidecar.simulator.wire_messages`,
:mod:`~sidecar.simulator.wire_responses` and the ``wires_*`` modules of the other servers)
are pure; generation and its I/O run in :mod:`~sidecar.simulator.node.event_run`.

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

import time
from dataclasses import dataclass

from aiohttp import web

from sidecar.simulator.common.errors import ApiError, in_dialect
from sidecar.simulator.common.validation import BodyValidationError
from sidecar.simulator.engine.faults import FaultKind
from sidecar.simulator.engine.generation import Mode, Token
from sidecar.simulator.engine.job import Job, Timings
from sidecar.simulator.messages_request import (
    check_messages,
    count_tokens,
    messages_chat,
    parse_messages,
)
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
from sidecar.simulator.responses_request import not_found, parse_responses
from sidecar.simulator.wire_messages import MessagesStream, MessagesWire
from sidecar.simulator.wire_responses import (
    ResponseHead,
    ResponsesStream,
    ResponsesWire,
    ResponseUsage,
)
from sidecar.simulator.wires_messages import MESSAGES_WIRES
from sidecar.simulator.wires_responses import RESPONSES_WIRES

_INTERNAL = "Internal server error"


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


# --------------------------------------------------------------------------- messages


async def messages_route(request: web.Request) -> web.StreamResponse:
    """``POST /v1/messages``."""
    node, agent = request.app[NODE_KEY], request.app[AGENT_KEY]
    wire, draw = agent.messages, RngDraw(node.rng)
    body: object = None
    try:
        fault = fault_of(request)
        if fault is not None and fault.kind is FaultKind.RESET_BEFORE_HEADERS:
            return await reset(request)
        body = await read_body(request)
        job = parse_messages(body, dialect=agent.dialect, known=node.behaviours.names,
                             max_model_len=node.config.max_model_len)
        trace = replay_trace(node, request, job.model)
    except BodyValidationError as exc:
        return json_answer(wire.validation_body(exc.message, exc.param, draw), 400,
                           wire.json_headers)
    except ApiError as err:
        err = in_dialect(agent.dialect, err, body)
        return json_answer(wire.error_body(err.status, err.err_type, err.message, draw), err.status,
                     wire.json_headers)
    if fault is not None and fault.kind is FaultKind.HTTP_500:
        return json_answer(wire.error_body(500, "InternalServerError", _INTERNAL, draw), 500,
                     wire.json_headers)
    given = request.headers.get("X-Request-Id")
    prefix = agent.thinking_off_prefix if job.spec.mode is Mode.NO_THINK else ""
    stream = MessagesStream(wire, wire.message_id(draw, given), job.model, draw,
                            leading_text=prefix)
    run = EventRun(node, request, job, fault, trace, wire.stream_headers, wire.json_headers)
    if job.stream:
        return await run.stream(_MessagesSink(stream, wire))
    result = await run.whole()
    if not isinstance(result, Whole):
        return result
    if result.failed:
        return json_answer(wire.error_body(500, "InternalServerError", _INTERNAL, draw), 500,
                     wire.json_headers)
    content = (prefix + result.content) if result.content else result.content
    return json_answer(wire.body(stream.msg_id, job.model, result.reasoning or None,
                                 content or None, result.finish_reason, job.prompt_tokens,
                                 result.completion_tokens, draw), 200, wire.json_headers)


async def count_tokens_route(request: web.Request) -> web.Response:
    """``POST /v1/messages/count_tokens``: the rendered prompt's length; nothing runs."""
    node, agent = request.app[NODE_KEY], request.app[AGENT_KEY]
    wire, draw = agent.messages, RngDraw(node.rng)
    body: object = None
    try:
        body = await read_body(request)
        if agent.dialect == "ollama":
            # ⚠ Ollama estimates (characters / 4) instead of tokenizing (source-read).
            req = check_messages(body, count_tokens=True)
            chars = sum(len(m["role"]) + len(m["content"]) for m in messages_chat(req))
            n = max(chars // 4, 1 if req.messages else 0)
        else:
            n = count_tokens(body, dialect=agent.dialect, known=node.behaviours.names)
    except BodyValidationError as exc:
        return json_answer(wire.validation_body(exc.message, exc.param, draw), 400,
                           wire.json_headers)
    except ApiError as err:
        err = in_dialect(agent.dialect, err, body)
        return json_answer(wire.error_body(err.status, err.err_type, err.message, draw), err.status,
                     wire.json_headers)
    return json_answer(wire.count_tokens_body(n), 200, wire.json_headers)


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
    body: object = None
    try:
        fault = fault_of(request)
        if fault is not None and fault.kind is FaultKind.RESET_BEFORE_HEADERS:
            return await reset(request)
        body = await read_body(request)
        parsed = parse_responses(body, dialect=agent.dialect, known=node.behaviours.names,
                                 default_model=default_model,
                                 max_model_len=node.config.max_model_len)
        trace = replay_trace(node, request, parsed.job.model)
    except BodyValidationError as exc:
        return json_answer(wire.validation_body(exc.message, exc.param), 400, wire.json_headers)
    except ApiError as err:
        err = in_dialect(agent.dialect, err, body)
        return json_answer(wire.error_body(err.status, err.err_type, err.message, err.param),
                     err.status, wire.json_headers)
    if fault is not None and fault.kind is FaultKind.HTTP_500:
        return json_answer(wire.error_body(500, "InternalServerError", _INTERNAL, None), 500,
                     wire.json_headers)
    job = parsed.job
    assert isinstance(body, dict)
    head = ResponseHead(wire.response_id(draw, parsed.response_id), int(time.time()),
                        job.model, parsed.echo, body)
    prefix = agent.thinking_off_prefix if job.spec.mode is Mode.NO_THINK else ""
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
    wire = request.app[AGENT_KEY].responses
    assert wire is not None
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
