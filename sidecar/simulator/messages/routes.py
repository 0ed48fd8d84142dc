"""The Anthropic Messages API routes of the simulated node: ``POST /v1/messages`` and
``/v1/messages/count_tokens``, on every server. Handlers only: reading a body
(:mod:`.request`) and encoding (:mod:`.stream`, :mod:`.vllm`, :mod:`.servers`) are pure;
generation and its I/O run in :mod:`~sidecar.simulator.node.event_run`.

Faults (``X-Sim-Fault``) as vLLM behaves on this endpoint: ``error-mid-stream`` is a lone
``event: error`` carrying pydantic's text; ``no-done`` leaves out ``message_stop``.
"""

from __future__ import annotations

from aiohttp import web

from sidecar.simulator.common.errors import ApiError, in_dialect
from sidecar.simulator.common.thinking import thinking_off_prefix
from sidecar.simulator.common.validation import BodyValidationError
from sidecar.simulator.engine.faults import FaultKind
from sidecar.simulator.engine.generation import Mode, Token
from sidecar.simulator.engine.job import Job, Timings
from sidecar.simulator.messages.request import (
    check_messages,
    count_tokens,
    messages_chat,
    parse_messages,
)
from sidecar.simulator.messages.servers import MESSAGES_WIRES
from sidecar.simulator.messages.stream import MessagesStream, MessagesWire
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

_INTERNAL = "Internal server error"
WIRE_KEY = web.AppKey("sim_messages_wire", MessagesWire)


def add_routes(app: web.Application, dialect: str) -> None:
    """Serve the Messages API the way ``dialect``'s server does (see :mod:`.vllm` and
    :mod:`.servers` for which parts are verified against real bytes)."""
    app[WIRE_KEY] = MESSAGES_WIRES[dialect]()
    app.router.add_post("/v1/messages", messages_route)
    app.router.add_post("/v1/messages/count_tokens", count_tokens_route)


async def messages_route(request: web.Request) -> web.StreamResponse:
    """``POST /v1/messages``."""
    node, wire = request.app[NODE_KEY], request.app[WIRE_KEY]
    draw = RngDraw(node.rng)
    body: object = None
    try:
        fault = fault_of(request)
        if fault is not None and fault.kind is FaultKind.RESET_BEFORE_HEADERS:
            return await reset(request)
        body = await read_body(request)
        job = parse_messages(body, dialect=node.dialect, known=node.behaviours.names,
                             max_model_len=node.config.max_model_len)
        trace = replay_trace(node, request, job.model)
    except BodyValidationError as exc:
        return json_answer(wire.validation_body(exc.message, exc.param, draw), 400,
                           wire.json_headers)
    except ApiError as err:
        err = in_dialect(node.dialect, err, body)
        return json_answer(wire.error_body(err.status, err.err_type, err.message, draw), err.status,
                     wire.json_headers)
    if fault is not None and fault.kind is FaultKind.HTTP_500:
        return json_answer(wire.error_body(500, "InternalServerError", _INTERNAL, draw), 500,
                     wire.json_headers)
    given = request.headers.get("X-Request-Id")
    prefix = thinking_off_prefix(node.dialect) if job.spec.mode is Mode.NO_THINK else ""
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
    node, wire = request.app[NODE_KEY], request.app[WIRE_KEY]
    draw = RngDraw(node.rng)
    body: object = None
    try:
        body = await read_body(request)
        if node.dialect == "ollama":
            # ⚠ Ollama estimates (characters / 4) instead of tokenizing (source-read).
            req = check_messages(body, count_tokens=True)
            chars = sum(len(m["role"]) + len(m["content"]) for m in messages_chat(req))
            n = max(chars // 4, 1 if req.messages else 0)
        else:
            n = count_tokens(body, dialect=node.dialect, known=node.behaviours.names)
    except BodyValidationError as exc:
        return json_answer(wire.validation_body(exc.message, exc.param, draw), 400,
                           wire.json_headers)
    except ApiError as err:
        err = in_dialect(node.dialect, err, body)
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
