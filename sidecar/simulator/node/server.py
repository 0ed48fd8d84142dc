"""The aiohttp app factory of the simulated vLLM node and the loop that serves it."""

from __future__ import annotations

import asyncio
import random
import zlib

from aiohttp import web

from sidecar.simulator.config import SimulatorConfig
from sidecar.simulator.engine.behaviours import Behaviours
from sidecar.simulator.messages import routes as messages_routes
from sidecar.simulator.node.chunk_run import chat_route, completions_route
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
from sidecar.simulator.ollama import routes as ollama_routes
from sidecar.simulator.responses import routes as responses_routes
from sidecar.simulator.wire import Vllm032Wire, WireDialect
from sidecar.simulator.wires import LlamaCppWire, OllamaOpenAIWire, SglangWire

_WIRES: dict[str, type[WireDialect]] = {
    "vllm": Vllm032Wire, "llamacpp": LlamaCppWire, "sglang": SglangWire,
    "ollama": OllamaOpenAIWire,
}


def make_simulator_app(config: SimulatorConfig) -> web.Application:
    """Build a simulated node as an aiohttp app: vLLM 0.32 (``--reasoning-parser qwen3``)
    by default, or the server named by ``config.dialect``."""
    behaviours = Behaviours(
        seed=config.seed,
        served_model_name=config.served_model_name,
        replay_file=config.replay_file,
        served_model_behaviour=config.served_model_behaviour,
    )
    node = Node(
        config=config,
        behaviours=behaviours,
        metrics=SimMetrics(behaviours.names),
        rng=random.Random(config.seed),  # noqa: S311 - reproducible ids, not secrets
        fingerprint=f"vllm-{VLLM_VERSION}-{zlib.crc32(str(config.seed).encode()):08x}",
        wire=_WIRES[config.dialect](),
        dialect=config.dialect,
    )
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[NODE_KEY] = node
    app.router.add_get("/health", health_route)
    app.router.add_get("/v1/models", models_route)
    app.router.add_get("/metrics", metrics_route)
    app.router.add_post("/v1/chat/completions", chat_route)
    app.router.add_post("/v1/completions", completions_route)
    app.router.add_post("/tokenize", tokenize_route)
    app.router.add_post("/v1/embeddings", embeddings_route)
    add_dialect_routes(app, config.dialect)
    ollama_routes.add_routes(app, config.dialect)
    messages_routes.add_routes(app, config.dialect)
    responses_routes.add_routes(app, config.dialect)
    return app


async def run_simulator(config: SimulatorConfig, host: str, port: int) -> None:
    """Serve a simulated node on ``host:port`` until cancelled, then clean up."""
    # A short shutdown: stalled streams (sim-stall, stall faults) never end by themselves.
    runner = web.AppRunner(make_simulator_app(config), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        # vLLM listens through uvicorn, whose accept backlog is 2048 (aiohttp's default is
        # 128): a burst of new connections from a proxy must not overflow it sooner here.
        site = web.TCPSite(runner, host, port, backlog=2048)
        await site.start()
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
