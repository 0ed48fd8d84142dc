"""State shared by all requests of one simulated node, and the helpers every route uses
to read a body and answer JSON."""

from __future__ import annotations

import random
import string
from collections.abc import Mapping
from dataclasses import dataclass, field

import orjson
from aiohttp import web

from sidecar.simulator.common.errors import ApiError
from sidecar.simulator.common.openai_wire import OpenAIServer
from sidecar.simulator.config import SimulatorConfig
from sidecar.simulator.engine.behaviours import Behaviours
from sidecar.simulator.engine.job import Job
from sidecar.simulator.node.metrics import SimMetrics

VLLM_VERSION = "0.32.0"
BASE_HEADERS = {"server": "uvicorn"}
JSON_HEADERS = {**BASE_HEADERS, "content-type": "application/json"}
#: Picks the trace ``sim-replay`` streams (an index or an id of the replay file).
TRACE_HEADER = "X-Sim-Trace"
_ALNUM = string.ascii_letters + string.digits


@dataclass(slots=True)
class Node:
    """Everything one simulated node shares between its requests (built once per app)."""

    config: SimulatorConfig
    behaviours: Behaviours
    metrics: SimMetrics
    #: How the node's server frames, ends and words errors on its OpenAI-style routes
    #: (the plain routes' errors too).
    server: OpenAIServer = field(default_factory=OpenAIServer)
    rng: random.Random = field(default_factory=random.Random)
    fingerprint: str = ""
    dialect: str = "vllm"

    def new_id(self, prefix: str, request: web.Request, job: Job | None) -> str:
        """``chatcmpl-…``/``cmpl-…`` from ``X-Request-Id``, the body's ``request_id``, or
        16 random hex digits, as vLLM does."""
        given = request.headers.get("X-Request-Id") or (job.request_id if job else None)
        return f"{prefix}-{given}" if given else f"{prefix}-{self.rng.getrandbits(64):016x}"


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


NODE_KEY = web.AppKey("sim_node", Node)


async def read_json(request: web.Request) -> object:
    """The request's JSON body (:class:`ApiError` 400 when it does not parse)."""
    raw = await request.read()
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"JSON decode error: {exc}") from None


def json_response(body: bytes, status: int = 200,
                  headers: Mapping[str, str] = JSON_HEADERS) -> web.Response:
    """A JSON body with the headers vLLM's uvicorn sends (or the given ones)."""
    return web.Response(status=status, body=body, headers=headers)


def error_response(node: Node, err: ApiError) -> web.Response:
    """An OpenAI-style error body with the error's status, in the node's dialect."""
    body = node.server.error_body(err.message, err.err_type, err.param, err.status,
                                  err.details)
    return json_response(body, err.status, node.server.json_headers)
