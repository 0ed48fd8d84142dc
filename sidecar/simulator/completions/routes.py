"""The ``/v1/completions`` route of the simulated node, on every server. The handler and
its chunk encoder: reading the body (:mod:`.request`) and the bytes (:mod:`.vllm`,
:mod:`.servers`) are pure; the run and its I/O are
:mod:`~sidecar.simulator.node.chunk_run`'s.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiohttp import web

from sidecar.simulator.common.openai_wire import ChoiceResult, StreamIdentity, Usage
from sidecar.simulator.completions.request import parse_completion
from sidecar.simulator.completions.servers import COMPLETIONS_WIRES
from sidecar.simulator.completions.vllm import VllmCompletions
from sidecar.simulator.engine.generation import Token
from sidecar.simulator.node.chunk_run import serve_chunks

WIRE_KEY = web.AppKey("sim_completions_wire", VllmCompletions)


def add_routes(app: web.Application, dialect: str) -> None:
    """Serve completions the way ``dialect``'s server does."""
    app[WIRE_KEY] = COMPLETIONS_WIRES[dialect]()
    app.router.add_post("/v1/completions", completions_route)


async def completions_route(request: web.Request) -> web.StreamResponse:
    """``POST /v1/completions``."""
    chunks = CompletionChunks(request.app[WIRE_KEY])
    return await serve_chunks(request, parse_completion, "cmpl", lambda _job: chunks)


class CompletionChunks:
    """The chunks of one completions request: every token's text as it comes, the
    invisible ones as empty text (no role chunk, no reasoning parser)."""

    __slots__ = ("wire",)

    answer_prefix = ""

    def __init__(self, wire: VllmCompletions) -> None:
        self.wire = wire

    def role(self, ident: StreamIdentity, index: int, usage: Usage | None) -> bytes | None:
        return None

    def token(self, ident: StreamIdentity, index: int, token: Token,
              finish_reason: str | None, usage: Usage | None,
              fingerprint: str | None) -> bytes | None:
        return self.wire.chunk(
            ident,
            index,
            token.text,
            finish_reason=finish_reason,
            stop_reason=token.stop_reason,
            usage=usage,
            fingerprint=fingerprint,
        )

    def choice_end(self, ident: StreamIdentity, index: int, finish_reason: str,
                   usage: Usage, *, include_usage: bool) -> bytes:
        return self.wire.choice_end(ident, index, finish_reason, usage,
                                    include_usage=include_usage)

    def usage(self, ident: StreamIdentity, usage: Usage, fingerprint: str) -> bytes:
        return self.wire.usage_chunk(ident, usage, fingerprint)

    def whole(self, ident: StreamIdentity, choices: Sequence[ChoiceResult], usage: Usage,
              fingerprint: str) -> bytes:
        return self.wire.response(ident, choices, usage, fingerprint)
