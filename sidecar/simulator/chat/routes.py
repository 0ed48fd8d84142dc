"""The ``/v1/chat/completions`` route of the simulated node, on every server. The handler
and its chunk encoder: reading the body (:mod:`.request`) and the bytes (:mod:`.vllm`,
:mod:`.servers`) are pure; the run and its I/O are
:mod:`~sidecar.simulator.node.chunk_run`'s.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiohttp import web

from sidecar.simulator.chat.request import parse_chat
from sidecar.simulator.chat.servers import CHAT_WIRES
from sidecar.simulator.chat.vllm import VllmChat
from sidecar.simulator.common.openai_wire import ChoiceResult, StreamIdentity, Usage
from sidecar.simulator.common.thinking import thinking_off_prefix
from sidecar.simulator.engine.generation import Channel, Mode, Token
from sidecar.simulator.engine.job import Job
from sidecar.simulator.node.chunk_run import serve_chunks
from sidecar.simulator.node.state import NODE_KEY

WIRE_KEY = web.AppKey("sim_chat_wire", VllmChat)


def add_routes(app: web.Application, dialect: str) -> None:
    """Serve chat completions the way ``dialect``'s server does."""
    app[WIRE_KEY] = CHAT_WIRES[dialect]()
    app.router.add_post("/v1/chat/completions", chat_route)


async def chat_route(request: web.Request) -> web.StreamResponse:
    """``POST /v1/chat/completions``."""
    wire, dialect = request.app[WIRE_KEY], request.app[NODE_KEY].dialect
    return await serve_chunks(request, parse_chat, "chatcmpl",
                              lambda job: ChatChunks(wire, job, dialect))


class ChatChunks:
    """The chunks of one chat request: what the reasoning parser shows of each token, in
    which delta field, with the role and the thinking-off prefix where a server puts
    them."""

    __slots__ = ("answer_prefix", "include_reasoning", "prefixed", "roled", "wire")

    def __init__(self, wire: VllmChat, job: Job, dialect: str) -> None:
        self.wire = wire
        self.include_reasoning = job.include_reasoning
        # The text a thinking-off answer starts with (llama.cpp), until each choice has it.
        self.answer_prefix = thinking_off_prefix(dialect) if job.spec.mode is Mode.NO_THINK else ""
        self.prefixed: set[int] = set()
        self.roled: set[int] = set()  # choices whose first delta carried the role

    def role(self, ident: StreamIdentity, index: int, usage: Usage | None) -> bytes | None:
        if self.wire.role_in_first_delta:
            return None
        return self.wire.role_chunk(ident, index, usage)

    def token(self, ident: StreamIdentity, index: int, token: Token,
              finish_reason: str | None, usage: Usage | None,
              fingerprint: str | None) -> bytes | None:
        wire = self.wire
        hidden = token.channel is Channel.REASONING and not self.include_reasoning
        if token.channel is Channel.SPECIAL or hidden:
            if finish_reason is None:
                return None  # the parser swallows <think>, </think> (and hidden reasoning)
            delta: dict[str, str] = dict(wire.eos_delta) if token.channel is Channel.SPECIAL else {}
        else:
            text = token.text
            if (self.answer_prefix and token.channel is Channel.CONTENT
                    and index not in self.prefixed):
                self.prefixed.add(index)
                text = self.answer_prefix + text
            delta = {token.channel.value: text}
        if wire.role_in_first_delta and index not in self.roled:
            self.roled.add(index)
            delta = {"role": "assistant", "content": "", **delta}
        return wire.delta_chunk(
            ident,
            index,
            delta,
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
