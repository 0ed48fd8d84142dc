"""Upstream streams of every registered wire API, recorded once per test session from the
simulated node (which the simulator's own tests hold byte-true to real servers)."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import aiohttp
import orjson
from aiohttp.test_utils import TestServer

from sidecar.core.wire import WireApi
from sidecar.simulator import SimulatorConfig, make_simulator_app

PROMPT = "Fix the IndexError in parse_rows()."
MAX_TOKENS = 400

#: A streaming request of each API for ``model``, and the simulated server that serves it.
REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "openai.chat": ("vllm", {"messages": [{"role": "user", "content": PROMPT}],
                             "stream": True, "max_tokens": MAX_TOKENS,
                             "stream_options": {"include_usage": True}}),
    "openai.completions": ("vllm", {"prompt": PROMPT, "stream": True,
                                    "max_tokens": MAX_TOKENS}),
    "anthropic.messages": ("vllm", {"messages": [{"role": "user", "content": PROMPT}],
                                    "stream": True, "max_tokens": MAX_TOKENS}),
    "openai.responses": ("vllm", {"input": PROMPT, "stream": True,
                                  "max_output_tokens": MAX_TOKENS}),
    "ollama.chat": ("ollama", {"messages": [{"role": "user", "content": PROMPT}],
                               "options": {"num_predict": MAX_TOKENS}}),
    "ollama.generate": ("ollama", {"prompt": PROMPT, "options": {"num_predict": MAX_TOKENS}}),
}

MODELS = ("sim-loop", "sim-healthy", "sim-leaky")


def request_body(api: WireApi, model: str, *, stream: bool = True) -> dict[str, Any]:
    """The request ``api``'s recorded stream answers, for ``model``; with ``stream=False``
    the same request from a non-streaming client."""
    body = {"model": model, **REQUESTS[api.name][1]}
    if not stream:
        body["stream"] = False
        body.pop("stream_options", None)
    return body


@functools.cache
def recorded(api_name: str, model: str) -> bytes:
    """The body of the upstream's streaming answer to ``api``'s request for ``model``."""
    dialect, _ = REQUESTS[api_name]
    from sidecar.apis import REGISTRY

    api = next(a for a in REGISTRY if a.name == api_name)

    async def fetch() -> bytes:
        server = TestServer(make_simulator_app(SimulatorConfig(tokens_per_second=0,
                                                               dialect=dialect, seed=7)),
                            host="127.0.0.1")
        await server.start_server()
        try:
            async with aiohttp.ClientSession() as session, session.post(
                    str(server.make_url(api.path)),
                    data=orjson.dumps(request_body(api, model)),
                    headers={"Content-Type": "application/json"}) as resp:
                assert resp.status == 200, await resp.text()
                assert resp.headers["Content-Type"].startswith(api.stream_type)
                return await resp.read()
        finally:
            await server.close()

    return asyncio.run(fetch())
