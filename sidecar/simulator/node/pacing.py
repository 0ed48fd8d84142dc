"""Pacing and disconnect checks of the simulated node's streams. They await but never
write to the client."""

from __future__ import annotations

import asyncio

from aiohttp import web

from sidecar.simulator.common.errors import ClientGoneError

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
