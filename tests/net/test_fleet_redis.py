"""Fleet-wide memory in a real Redis: shared runaways across sidecars, and Redis down.

Needs ``redis-server`` on PATH (Debian package ``redis-server``; ``.ci/run`` installs it).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator

import aiohttp
import pytest

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
    """A throwaway redis-server on a loopback port, without persistence."""
    binary = shutil.which("redis-server")
    assert binary, "redis-server is required: apt-get install redis-server"
    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0"
    proc.terminate()
    proc.wait(timeout=10)


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
    assert stack.metric("runaway_sidecar_fleet_memory_errors_total", op="remember") == 1
