"""The simulated node with its APIs: the registry of API folders, the app factory and the
serving loop (the public entry points, re-exported by :mod:`sidecar.simulator`)."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from sidecar.simulator.chat import routes as chat
from sidecar.simulator.completions import routes as completions
from sidecar.simulator.config import SimulatorConfig
from sidecar.simulator.messages import routes as messages
from sidecar.simulator.node.serving import node_app, serve
from sidecar.simulator.ollama import routes as ollama
from sidecar.simulator.responses import routes as responses

#: The APIs the node serves, one folder each (explicit; nothing is discovered). Each adds
#: its routes, and its wire for the node's server, to the app (or none, where that server
#: lacks the API).
APIS: tuple[Callable[[web.Application, str], None], ...] = (
    chat.add_routes,
    completions.add_routes,
    messages.add_routes,
    responses.add_routes,
    ollama.add_routes,
)


def make_simulator_app(config: SimulatorConfig) -> web.Application:
    """Build a simulated node as an aiohttp app: vLLM 0.32 (``--reasoning-parser qwen3``)
    by default, or the server named by ``config.dialect``."""
    app = node_app(config)
    for add_routes in APIS:
        add_routes(app, config.dialect)
    return app


async def run_simulator(config: SimulatorConfig, host: str, port: int) -> None:
    """Serve a simulated node on ``host:port`` until cancelled, then clean up."""
    await serve(make_simulator_app(config), host, port)
