"""A simulated vLLM node with a sidecar in front, on real loopback ports (test helper)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry, generate_latest

from sidecar.config import Config
from sidecar.net.proxy import Proxy
from sidecar.obs.metrics import Metrics
from sidecar.service.app import PROXY, make_app
from sidecar.simulator import SimulatorConfig, make_simulator_app


@dataclass
class Stack:
    """Handles on one simulator + sidecar pair."""

    sim: TestServer
    sidecar: TestServer
    registry: CollectorRegistry
    proxy: Proxy
    tap: Tap | None = None

    @property
    def sim_url(self) -> str:
        return str(self.sim.make_url("")).rstrip("/")

    @property
    def url(self) -> str:
        return str(self.sidecar.make_url("")).rstrip("/")

    def metric(self, name: str, **labels: str) -> float:
        """Current value of one sidecar sample (0 when absent)."""
        value = self.registry.get_sample_value(name, labels)
        return value or 0.0

    def sidecar_metrics_text(self) -> str:
        return generate_latest(self.registry).decode()

    async def sim_metric(self, name: str, **labels: str) -> float:
        """Sum of the simulator's samples called ``name`` whose labels include ``labels``."""
        async with aiohttp.ClientSession() as s, s.get(self.sim_url + "/metrics") as r:
            return sample_sum(await r.text(), name, **labels)


def sample_sum(text: str, name: str, **labels: str) -> float:
    """Sum of the samples called ``name`` in a Prometheus text page whose labels include
    ``labels`` (0 when there is none)."""
    total = 0.0
    for line in text.splitlines():
        m = re.match(r"^([^{\s]+)(\{([^}]*)\})?\s+(\S+)$", line)
        if not m or m.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', m.group(3) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(m.group(4))
    return total


class Tap:
    """A pass-through in front of the simulator that keeps every request body it relays:
    what the node received, for tests that check what the sidecar sent upstream."""

    def __init__(self, sim: TestServer) -> None:
        self.bodies: list[bytes] = []
        self._sim = str(sim.make_url("")).rstrip("/")
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._relay)
        self.server = TestServer(app, host="127.0.0.1")

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.bodies.append(body)
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() in ("content-type", "x-request-id")}
        async with aiohttp.ClientSession() as s, s.request(
                request.method, self._sim + request.path_qs, data=body, headers=headers) as r:
            resp = web.StreamResponse(status=r.status, headers={
                "Content-Type": r.headers.get("Content-Type", "application/json")})
            await resp.prepare(request)
            async for chunk in r.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp


async def start_stack(tokens_per_second: float = 0.0, *, tap: bool = False,
                      **config: Any) -> Stack:
    """Start a simulator and a sidecar pointed at it (through a :class:`Tap` with
    ``tap=True``, then ``stack.tap``); ``config`` sets Config fields (``detectors`` may be
    a dict of DetectorConfig fields)."""
    sim = TestServer(make_simulator_app(SimulatorConfig(tokens_per_second=tokens_per_second)),
                     host="127.0.0.1")
    await sim.start_server()
    upstream = sim
    tapped = None
    if tap:
        tapped = Tap(sim)
        await tapped.server.start_server()
        upstream = tapped.server
    cfg = Config(upstream=str(upstream.make_url("")).rstrip("/"))
    det = config.pop("detectors", None)
    if det:
        config["detectors"] = dataclasses.replace(cfg.detectors, **det)
    cfg = dataclasses.replace(cfg, **config)
    registry = CollectorRegistry()
    app = make_app(cfg, Metrics(registry, ["*"], "test"))
    sidecar = TestServer(app, host="127.0.0.1")
    await sidecar.start_server()
    return Stack(sim, sidecar, registry, app[PROXY], tapped)


StackFactory = Callable[..., Awaitable[Stack]]


async def stop_stack(stack: Stack) -> None:
    await stack.sidecar.close()
    if stack.tap is not None:
        await stack.tap.server.close()
    await stack.sim.close()
