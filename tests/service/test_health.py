"""Tests for sidecar.service.health: /metrics, /healthz, /readyz and the upstream probe."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from sidecar.obs.metrics import Metrics
from sidecar.service.health import make_metrics_app, upstream_probe

ClientFactory = Callable[[web.Application], Awaitable[TestClient[web.Request, web.Application]]]
ServerFactory = Callable[[web.Application], Awaitable[TestServer]]


def fixed(value: bool) -> Callable[[], Awaitable[bool]]:
    async def readiness() -> bool:
        return value

    return readiness


async def test_metrics_endpoint_serves_the_registry(aiohttp_client: ClientFactory) -> None:
    """GET /metrics returns the exposition of the injected registry with its counts."""
    registry = CollectorRegistry()
    m = Metrics(registry, ["m1"], "0.1.0")
    m.request_done("chat", "ok", "m1")
    m.request_done("chat", "ok", "m1")
    client = await aiohttp_client(make_metrics_app(registry, fixed(True)))
    resp = await client.get("/metrics")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/plain")
    text = await resp.text()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }
    key = (
        "runaway_sidecar_requests_total",
        (("model", "m1"), ("outcome", "ok"), ("route", "chat")),
    )
    assert samples[key] == 2


async def test_healthz_is_always_ok(aiohttp_client: ClientFactory) -> None:
    """/healthz answers 200 even when the upstream is not ready."""
    client = await aiohttp_client(make_metrics_app(CollectorRegistry(), fixed(False)))
    resp = await client.get("/healthz")
    assert resp.status == 200
    assert await resp.text() == "ok\n"


async def test_readyz_follows_the_callback(aiohttp_client: ClientFactory) -> None:
    """/readyz is 200 when the callback says ready and 503 when it does not."""
    state = {"ready": False}

    async def readiness() -> bool:
        return state["ready"]

    client = await aiohttp_client(make_metrics_app(CollectorRegistry(), readiness))
    assert (await client.get("/readyz")).status == 503
    state["ready"] = True
    assert (await client.get("/readyz")).status == 200


async def test_readyz_treats_errors_and_hangs_as_not_ready(aiohttp_client: ClientFactory) -> None:
    """A callback that raises or outlives the timeout gives 503, never a 500 or a hang."""

    async def broken() -> bool:
        raise RuntimeError("probe bug")

    async def hangs() -> bool:
        await asyncio.sleep(30)
        return True

    c1 = await aiohttp_client(make_metrics_app(CollectorRegistry(), broken))
    assert (await c1.get("/readyz")).status == 503
    c2 = await aiohttp_client(make_metrics_app(CollectorRegistry(), hangs, readiness_timeout=0.05))
    assert (await c2.get("/readyz")).status == 503


async def test_extra_routes_are_served(aiohttp_client: ClientFactory) -> None:
    """Routes passed as extra_routes (e.g. /debug/policy) are added to the app."""

    async def policy(_request: web.Request) -> web.Response:
        return web.json_response({"rules": []})

    app = make_metrics_app(
        CollectorRegistry(), fixed(True), extra_routes=[web.get("/debug/policy", policy)]
    )
    client = await aiohttp_client(app)
    resp = await client.get("/debug/policy")
    assert resp.status == 200
    assert await resp.json() == {"rules": []}


async def test_upstream_probe_reads_health_status(aiohttp_server: ServerFactory) -> None:
    """The probe is True on a 200 from /health, False on 503 and on a closed port."""
    status = {"code": 200}

    async def health(_request: web.Request) -> web.Response:
        return web.Response(status=status["code"])

    upstream = web.Application()
    upstream.router.add_get("/health", health)
    server = await aiohttp_server(upstream)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    async with aiohttp.ClientSession() as session:
        probe = upstream_probe(session, str(server.make_url("/")))
        assert await probe() is True
        status["code"] = 503
        assert await probe() is False
        dead = upstream_probe(session, f"http://127.0.0.1:{closed_port}", timeout=1.0)
        assert await dead() is False
