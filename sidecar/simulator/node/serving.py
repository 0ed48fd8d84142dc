"""The simulated node as an aiohttp app before any API is added (its state and plain
routes), and the loop that serves an app. The APIs are added by
:func:`sidecar.simulator.app.make_simulator_app`."""

from __future__ import annotations

import asyncio
import random
import zlib

from aiohttp import web

from sidecar.simulator.common.openai_wire import OPENAI_SERVERS
from sidecar.simulator.config import SimulatorConfig
from sidecar.simulator.engine.behaviours import Behaviours
from sidecar.simulator.node.metrics import SimMetrics
from sidecar.simulator.node.plain_routes import (
    add_dialect_routes,
    embeddings_route,
    health_route,
    metrics_route,
    models_route,
    tokenize_route,
)
from sidecar.simulator.node.state import NODE_KEY, VLLM_VERSION, Node


def make_node(config: SimulatorConfig) -> Node:
    """The state one simulated node shares between its requests."""
    behaviours = Behaviours(
        seed=config.seed,
        served_model_name=config.served_model_name,
        replay_file=config.replay_file,
        served_model_behaviour=config.served_model_behaviour,
    )
    return Node(
        config=config,
        behaviours=behaviours,
        metrics=SimMetrics(behaviours.names),
        rng=random.Random(config.seed),  # noqa: S311 - reproducible ids, not secrets
        fingerprint=f"vllm-{VLLM_VERSION}-{zlib.crc32(str(config.seed).encode()):08x}",
        server=OPENAI_SERVERS[config.dialect](),
        dialect=config.dialect,
    )


def node_app(config: SimulatorConfig) -> web.Application:
    """An app holding the node (``NODE_KEY``) and its plain routes: health, models,
    metrics, tokenize, embeddings and the routes that tell servers apart."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[NODE_KEY] = make_node(config)
    app.router.add_get("/health", health_route)
    app.router.add_get("/v1/models", models_route)
    app.router.add_get("/metrics", metrics_route)
    app.router.add_post("/tokenize", tokenize_route)
    app.router.add_post("/v1/embeddings", embeddings_route)
    add_dialect_routes(app, config.dialect)
    return app


async def serve(app: web.Application, host: str, port: int) -> None:
    """Serve ``app`` on ``host:port`` until cancelled, then clean up."""
    # A short shutdown: stalled streams (sim-stall, stall faults) never end by themselves.
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        # vLLM listens through uvicorn, whose accept backlog is 2048 (aiohttp's default is
        # 128): a burst of new connections from a proxy must not overflow it sooner here.
        site = web.TCPSite(runner, host, port, backlog=2048)
        await site.start()
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
