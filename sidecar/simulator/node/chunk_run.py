"""One generation request on an OpenAI-style route (chat, completions) served as a stream of
chunks or as one body: ``n`` choices interleaved as engine steps, pacing, faults and
disconnects. It awaits and writes to the client; which chunk a token makes is decided by
the route's :class:`Chunks` (pure encoders underneath), how the server frames, ends and
words errors by the node's :class:`~sidecar.simulator.common.openai_wire.OpenAIServer`.

A client that goes away is noticed within one pacing slice (at most 0.05 s): the transport
is checked before every write and at every engine step, and write errors count as a
disconnect too. Generation then stops, the running gauge drops, and the request is counted
in ``sim:disconnected_requests_total`` but not in ``vllm:request_success_total``, as on vLLM.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from aiohttp import web

from sidecar.simulator.common.errors import ApiError, ClientGoneError
from sidecar.simulator.common.openai_request import request_body
from sidecar.simulator.common.openai_wire import ChoiceResult, StreamIdentity, Usage
from sidecar.simulator.engine.behaviours import Trace
from sidecar.simulator.engine.faults import (
    INVALID_SSE,
    Fault,
    FaultHeaderError,
    FaultKind,
    parse_fault,
)
from sidecar.simulator.engine.generation import Channel, Mode, Script, Token, generate, interleave
from sidecar.simulator.engine.job import Job
from sidecar.simulator.node.metrics import Accounting
from sidecar.simulator.node.pacing import Pacer, client_gone, wait_or_gone
from sidecar.simulator.node.state import (
    JSON_HEADERS,
    NODE_KEY,
    TRACE_HEADER,
    Node,
    error_response,
    json_response,
    read_json,
)

_THINKING_MODES = (Mode.THINK, Mode.THINK_PREFILLED)


class Parse(Protocol):
    """An OpenAI-style route's request reader (raises :class:`ApiError`)."""

    def __call__(self, body: object, *, known: tuple[str, ...], max_model_len: int,
                 server: str) -> Job: ...


class Chunks(Protocol):
    """What :class:`ChunkRun` needs from a route's encoder (one per request)."""

    #: Text put before each choice's answer in a whole body.
    answer_prefix: str

    def role(self, ident: StreamIdentity, index: int, usage: Usage | None) -> bytes | None:
        """The chunk that opens a choice at the first step (``None``: the route or the
        server sends none)."""

    def token(self, ident: StreamIdentity, index: int, token: Token,
              finish_reason: str | None, usage: Usage | None,
              fingerprint: str | None) -> bytes | None:
        """The chunk of one token (``None``: the reasoning parser swallows it)."""

    def choice_end(self, ident: StreamIdentity, index: int, finish_reason: str,
                   usage: Usage, *, include_usage: bool) -> bytes:
        """The end of one choice, on servers that end choices alone."""

    def usage(self, ident: StreamIdentity, usage: Usage, fingerprint: str) -> bytes:
        """The trailing usage-only chunk."""

    def whole(self, ident: StreamIdentity, choices: Sequence[ChoiceResult], usage: Usage,
              fingerprint: str) -> bytes:
        """A whole non-streaming body."""


def _scripts(node: Node, job: Job, trace: Trace | None) -> list[Script]:
    return [
        node.behaviours.script(job.model, key=job.prompt, choice=i, trace=trace)
        for i in range(job.n)
    ]


async def serve_chunks(request: web.Request, parse: Parse, id_prefix: str,
                       chunks_for: Callable[[Job], Chunks]) -> web.StreamResponse:
    """Serve one OpenAI-style request: its fault, body (``parse``), replay trace and run;
    ``id_prefix`` starts the response id, ``chunks_for`` gives the job's encoder."""
    node = request.app[NODE_KEY]
    try:
        fault = parse_fault(request.headers)
    except FaultHeaderError as exc:
        return error_response(node, ApiError(400, str(exc), param="X-Sim-Fault"))
    if fault is not None and fault.kind is FaultKind.RESET_BEFORE_HEADERS:
        await request.read()
        if request.transport is not None:
            request.transport.abort()
        # Nothing reaches the client; aiohttp drops a response for an aborted transport.
        return web.Response(status=499)
    try:
        body = request_body(node.dialect, await read_json(request))
        job = parse(body, known=node.behaviours.names, max_model_len=node.config.max_model_len,
                    server=node.dialect)
        trace = None
        if job.model == "sim-replay":
            try:
                trace = node.behaviours.replay_trace(request.headers.get(TRACE_HEADER))
            except LookupError as exc:
                raise ApiError(404, str(exc), "NotFoundError", TRACE_HEADER) from None
    except ApiError as err:
        return error_response(node, err)
    if fault is not None and fault.kind is FaultKind.HTTP_500:
        return error_response(node, ApiError(500, "Internal server error", "InternalServerError"))
    scripts = _scripts(node, job, trace)
    ident = StreamIdentity(node.new_id(id_prefix, request, job), int(time.time()), job.model)
    run = ChunkRun(
        node=node,
        request=request,
        job=job,
        ident=ident,
        fault=fault,
        # sim-stall stalls while thinking; with thinking off it answers like the others.
        stall_after=scripts[0].stall_after if job.spec.mode in _THINKING_MODES else None,
        chunks=chunks_for(job),
    )
    return await run.execute([generate(script, job.spec) for script in scripts])


class ChunkRun:
    """One OpenAI-style generation request being served."""

    def __init__(
        self,
        *,
        node: Node,
        request: web.Request,
        job: Job,
        ident: StreamIdentity,
        fault: Fault | None,
        stall_after: int | None,
        chunks: Chunks,
    ) -> None:
        self.node = node
        self.request = request
        self.job = job
        self.ident = ident
        self.fault = fault
        self.stall_after = stall_after
        self.chunks = chunks
        self.accounting = Accounting(node.metrics, job.model)
        self.sent = 0  # token chunks sent (or, non-streaming, tokens generated)
        self.resp: web.StreamResponse | None = None

    def _fault(self, kind: FaultKind) -> bool:
        return self.fault is not None and self.fault.kind is kind

    async def execute(self, choices: list[Iterator[Token]]) -> web.StreamResponse:
        self.accounting.start(self.job)
        disconnected = False
        try:
            if self.job.stream:
                return await self._stream(choices)
            return await self._whole(choices)
        except (ClientGoneError, ConnectionError):
            disconnected = True
            return self.resp if self.resp is not None else web.Response(status=499)
        except asyncio.CancelledError:
            disconnected = True
            raise
        finally:
            self.accounting.end(disconnected=disconnected)

    async def _write(self, data: bytes) -> None:
        if self.resp is None:
            raise RuntimeError("write before the stream was opened")
        if client_gone(self.request):
            raise ClientGoneError
        await self.resp.write(data)

    async def _flush(self) -> None:
        """Wait (bounded) until the transport has handed every written byte to the OS."""
        transport = self.request.transport
        for _ in range(200):
            if transport is None or transport.is_closing():
                return
            if transport.get_write_buffer_size() == 0:
                return
            await asyncio.sleep(0.005)

    async def _after_token(self) -> bool:
        """Apply mid-stream faults and stalls once a token chunk went out; True stops."""
        self.sent += 1
        fault = self.fault
        if self.stall_after is not None and self.sent >= self.stall_after:
            await wait_or_gone(self.request, None)
        if fault is None or self.sent < fault.after:
            return False
        if fault.kind is FaultKind.RESET_MID_STREAM:
            await self._flush()  # the N chunks must reach the client before the cut
            if self.request.transport is not None:
                self.request.transport.abort()
            raise ClientGoneError
        if fault.kind is FaultKind.STALL_MID_STREAM:
            await wait_or_gone(self.request, None)
        if fault.kind is FaultKind.ERROR_MID_STREAM and self.job.stream:
            self.accounting.fail()
            server = self.node.server
            await self._write(
                server.stream_error("Internal server error", "InternalServerError", 500)
            )
            tail = server.done_after_error()
            if tail:
                await self._write(tail)
            return True
        return fault.kind is FaultKind.NO_DONE and fault.after_given and self.job.stream

    def _usage(self, token: Token | None) -> Usage:
        if token is None:
            return Usage(self.job.prompt_tokens, 0, 0)
        return Usage(self.job.prompt_tokens, token.completion_tokens, token.reasoning_tokens)

    def _chunk(self, index: int, token: Token) -> bytes | None:
        if token.finish_reason is None or not self.node.server.ends_choices_alone:
            return self._token_chunk(index, token, token.finish_reason)
        # The choice's last token, then its own end (finish, usage, timings).
        text = b""
        if token.channel is not Channel.SPECIAL:
            text = self._token_chunk(index, token, None) or b""
        return text + self.chunks.choice_end(self.ident, index, token.finish_reason,
                                             self._usage(token),
                                             include_usage=self.job.include_usage)

    def _token_chunk(self, index: int, token: Token, finish_reason: str | None) -> bytes | None:
        job = self.job
        usage = self._usage(token) if job.continuous_usage else None
        fingerprint = (
            self.node.fingerprint
            if finish_reason is not None and not job.include_usage
            else None
        )
        return self.chunks.token(self.ident, index, token, finish_reason, usage, fingerprint)

    async def _stream(self, choices: list[Iterator[Token]]) -> web.StreamResponse:
        job, server, node = self.job, self.node.server, self.node
        if self._fault(FaultKind.INVALID_SSE):
            self.resp = await self._open()
            await self._write(INVALID_SSE)
            await self.resp.write_eof()
            return self.resp
        self.resp = await self._open()
        if self._fault(FaultKind.SLOW_FIRST_TOKEN) and self.fault is not None:
            await wait_or_gone(self.request, self.fault.delay)
        pacer = Pacer(self.request, node.config.tokens_per_second)
        last: dict[int, Token] = {}
        first = True
        for step in interleave(choices):
            if first:
                for index in range(job.n):
                    usage = self._usage(None) if job.continuous_usage else None
                    role = self.chunks.role(self.ident, index, usage)
                    if role is not None:
                        await self._write(role)
            first = False
            for index, token in step:
                self.accounting.token(token)
                last[index] = token
                chunk = self._chunk(index, token)
                if chunk is None:
                    continue
                await self._write(chunk)
                if await self._after_token():
                    await self.resp.write_eof()
                    return self.resp
            await pacer.step()
        if job.include_usage and not server.ends_choices_alone:
            total = Usage(
                job.prompt_tokens,
                sum(t.completion_tokens for t in last.values()),
                sum(t.reasoning_tokens for t in last.values()),
            )
            await self._write(self.chunks.usage(self.ident, total, node.fingerprint))
        if not self._fault(FaultKind.NO_DONE):
            await self._write(server.done())
        await self.resp.write_eof()
        return self.resp

    async def _open(self) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers=self.node.server.sse_headers)
        resp.enable_chunked_encoding()
        await resp.prepare(self.request)
        return resp

    async def _whole(self, choices: list[Iterator[Token]]) -> web.StreamResponse:
        job, node = self.job, self.node
        if self._fault(FaultKind.SLOW_FIRST_TOKEN) and self.fault is not None:
            await wait_or_gone(self.request, self.fault.delay)
        pacer = Pacer(self.request, node.config.tokens_per_second)
        texts: dict[int, dict[Channel, list[str]]] = {
            i: {Channel.REASONING: [], Channel.CONTENT: []} for i in range(job.n)
        }
        last: dict[int, Token] = {}
        for step in interleave(choices):
            for index, token in step:
                self.accounting.token(token)
                last[index] = token
                if token.channel is not Channel.SPECIAL:
                    texts[index][token.channel].append(token.text)
                if token.channel is not Channel.SPECIAL or token.finish_reason is not None:
                    if (
                        self._fault(FaultKind.ERROR_MID_STREAM)
                        and self.fault is not None
                        and self.sent + 1 >= self.fault.after
                    ):
                        self.accounting.fail()
                        return error_response(
                            node, ApiError(500, "Internal server error", "InternalServerError")
                        )
                    if await self._after_token():
                        break
            await pacer.step()
        if self._fault(FaultKind.INVALID_SSE):
            return web.Response(status=200, body=INVALID_SSE, headers=JSON_HEADERS)
        results = []
        for index in range(job.n):
            token = last[index]
            reasoning = "".join(texts[index][Channel.REASONING]) if job.include_reasoning else ""
            content = "".join(texts[index][Channel.CONTENT])
            if content and self.chunks.answer_prefix:
                content = self.chunks.answer_prefix + content
            results.append(
                ChoiceResult(
                    index,
                    reasoning or None,
                    content or None,
                    token.finish_reason or "length",
                    token.stop_reason,
                )
            )
        usage = Usage(
            job.prompt_tokens,
            sum(t.completion_tokens for t in last.values()),
            sum(t.reasoning_tokens for t in last.values()),
        )
        return json_response(self.chunks.whole(self.ident, results, usage, node.fingerprint),
                             headers=node.server.json_headers)
