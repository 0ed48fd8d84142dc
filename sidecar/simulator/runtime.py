"""Per-request runtime helpers of the simulated node: disconnect checks, pacing, metrics
bookkeeping. They await but never write to the client."""

from __future__ import annotations

import asyncio

from aiohttp import web

from sidecar.simulator.common.errors import ClientGoneError
from sidecar.simulator.engine.generation import Token
from sidecar.simulator.engine.job import Job
from sidecar.simulator.metrics import ENGINE
from sidecar.simulator.node import Node

SLICE = 0.05  # longest sleep between two disconnect checks


def client_gone(request: web.Request) -> bool:
    """Whether the client's connection is closed or closing."""
    transport = request.transport
    return transport is None or transport.is_closing()


async def wait_or_gone(request: web.Request, seconds: float | None) -> None:
    """Sleep ``seconds`` (forever if ``None``) in short slices, raising as soon as the
    client is gone."""
    loop = asyncio.get_running_loop()
    deadline = None if seconds is None else loop.time() + seconds
    while True:
        if client_gone(request):
            raise ClientGoneError
        if deadline is None:
            await asyncio.sleep(SLICE)
            continue
        left = deadline - loop.time()
        if left <= 0:
            return
        await asyncio.sleep(min(left, SLICE))


class Pacer:
    """Schedules engine steps against the stream's start time, so the pace never drifts."""

    __slots__ = ("_interval", "_request", "_start", "_steps")

    def __init__(self, request: web.Request, tokens_per_second: float) -> None:
        self._interval = 1.0 / tokens_per_second if tokens_per_second > 0 else 0.0
        self._request = request
        self._start = asyncio.get_running_loop().time()
        self._steps = 0

    async def step(self) -> None:
        self._steps += 1
        if self._interval:
            target = self._start + self._steps * self._interval
            await wait_or_gone(self._request, target - asyncio.get_running_loop().time())
        else:
            await asyncio.sleep(0)  # let the loop see a closed connection
        if client_gone(self._request):
            raise ClientGoneError


class Accounting:
    """Running/finished bookkeeping of one request on the node's metrics."""

    __slots__ = ("_generated", "_running", "active", "model", "node")

    def __init__(self, node: Node, model: str) -> None:
        self.node = node
        self.model = model
        self.active = 0
        # Resolved once: the per-token path must not look labels up.
        self._generated = node.metrics.generation_tokens.labels(model, ENGINE)
        self._running = node.metrics.running.labels(model, ENGINE)

    def start(self, job: Job) -> None:
        m = self.node.metrics
        m.requests.labels(job.model, "on" if job.thinking else "off").inc()
        m.prompt_tokens.labels(self.model, ENGINE).inc(job.prompt_tokens * job.n)
        self._running.inc(job.n)
        self.active = job.n

    def token(self, token: Token) -> None:
        self._generated.inc()
        if token.finish_reason is not None:
            self.node.metrics.request_success.labels(self.model, ENGINE, token.finish_reason).inc()
            self._running.dec()
            self.active -= 1

    def fail(self) -> None:
        """The engine errored: every unfinished choice ends with ``error``."""
        if self.active:
            m = self.node.metrics
            m.request_success.labels(self.model, ENGINE, "error").inc(self.active)
            self._running.dec(self.active)
            self.active = 0

    def end(self, *, disconnected: bool) -> None:
        if self.active:
            self._running.dec(self.active)
            self.active = 0
        if disconnected:
            self.node.metrics.disconnected.inc()
