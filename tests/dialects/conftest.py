"""Fixtures for the dialect tests: a simulated llama.cpp, SGLang, Ollama or vLLM node and
a sidecar in front of it, on real loopback ports."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry

from sidecar.config import Config
from sidecar.obs.metrics import Metrics
from sidecar.service.app import PROXY, make_app
from sidecar.simulator import SimulatorConfig, make_simulator_app
from tests.stack import Stack

DialectStack = Callable[..., Awaitable[Stack]]


@pytest.fixture
async def dialect_stack() -> AsyncIterator[DialectStack]:
    """Factory: ``await dialect_stack("ollama", dialect="auto", mode=...)``: a simulator
    speaking ``sim_dialect`` and a sidecar whose Config fields are ``config``."""
    started: list[Stack] = []

    async def start(sim_dialect: str, **config: Any) -> Stack:
        sim = TestServer(make_simulator_app(
            SimulatorConfig(tokens_per_second=0.0, dialect=sim_dialect)), host="127.0.0.1")
        await sim.start_server()
        config.setdefault("dialect", sim_dialect)
        cfg = dataclasses.replace(Config(upstream=str(sim.make_url("")).rstrip("/")), **config)
        registry = CollectorRegistry()
        app = make_app(cfg, Metrics(registry, ["*"], "test"))
        sidecar = TestServer(app, host="127.0.0.1")
        await sidecar.start_server()
        stack = Stack(sim, sidecar, registry, app[PROXY])
        started.append(stack)
        return stack

    yield start
    for stack in started:
        await stack.sidecar.close()
        await stack.sim.close()
