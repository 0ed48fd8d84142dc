"""Plain routes and metrics of the simulated node."""

from __future__ import annotations

import orjson

from sidecar.simulator import SimulatorConfig, make_simulator_app
from tests.simulator.conftest import SimFactory, hello, metric


async def test_health_is_empty_200(sim: SimFactory) -> None:
    """/health answers 200 with an empty body, like vLLM."""
    client = await sim()
    resp = await client.get("/health")
    assert resp.status == 200
    assert await resp.read() == b""
    assert resp.headers["server"] == "uvicorn"


async def test_models_lists_every_model(sim: SimFactory) -> None:
    """/v1/models is a vLLM-shaped list with max_model_len."""
    client = await sim(max_model_len=4096)
    data = orjson.loads(await (await client.get("/v1/models")).read())
    assert data["object"] == "list"
    ids = [m["id"] for m in data["data"]]
    assert ids[:7] == [
        "sim-healthy",
        "sim-loop",
        "sim-paraphrase-loop",
        "sim-long-thinking",
        "sim-cjk-loop",
        "sim-leaky",
        "sim-stall",
    ]
    assert ids[-1] == "tiny-qwen"
    assert all(m["max_model_len"] == 4096 for m in data["data"])
    assert all(m["owned_by"] == "vllm" for m in data["data"])


async def test_tokenize_counts_like_usage(sim: SimFactory) -> None:
    """/tokenize counts the same prompt tokens that usage reports."""
    client = await sim()
    body = {"model": "tiny-qwen", "messages": [{"role": "user", "content": "Hello"}]}
    data = orjson.loads(await (await client.post("/tokenize", json=body)).read())
    assert data["count"] == 9
    assert len(data["tokens"]) == 9
    assert data["max_model_len"] == 8192
    data = orjson.loads(await (await client.post("/tokenize", json={"prompt": "Hi there"})).read())
    assert data["count"] == 2


async def test_embeddings_are_deterministic(sim: SimFactory) -> None:
    """/v1/embeddings returns one stable vector per input and prompt-token usage."""
    client = await sim()
    body = {"model": "sim-healthy", "input": "Hello world"}
    first = orjson.loads(await (await client.post("/v1/embeddings", json=body)).read())
    second = orjson.loads(await (await client.post("/v1/embeddings", json=body)).read())
    assert first["data"][0]["embedding"] == second["data"][0]["embedding"]
    assert len(first["data"][0]["embedding"]) == 16
    assert first["usage"]["prompt_tokens"] == 2
    resp = await client.post("/v1/embeddings", json={"model": "nope", "input": "x"})
    assert resp.status == 404


async def test_metrics_have_vllm_names_and_labels(sim: SimFactory) -> None:
    """/metrics exposes vLLM 0.32's series with model_name and engine labels."""
    client = await sim()
    await client.post("/v1/chat/completions", json=hello(model="sim-loop", max_tokens=4))
    text = await (await client.get("/metrics")).text()
    labels = 'engine="0",model_name="sim-loop"'
    assert f"vllm:num_requests_running{{{labels}}} 0.0" in text
    assert f"vllm:generation_tokens_total{{{labels}}} 4.0" in text
    assert f"vllm:prompt_tokens_total{{{labels}}} 9.0" in text
    assert (
        'vllm:request_success_total{engine="0",finished_reason="length",model_name="sim-loop"} 1.0'
        in text
    )
    assert 'sim:requests_total{model_name="sim-loop",thinking="on"} 1.0' in text
    assert "sim:disconnected_requests_total 0.0" in text


async def test_registries_are_per_app(aiohttp_client: object) -> None:
    """Two apps in one process keep separate metrics (no global registry)."""
    first = make_simulator_app(SimulatorConfig(tokens_per_second=0))
    second = make_simulator_app(SimulatorConfig(tokens_per_second=0))
    client_a = await aiohttp_client(first)  # type: ignore[operator]
    client_b = await aiohttp_client(second)  # type: ignore[operator]
    await client_a.post("/v1/chat/completions", json=hello(model="sim-loop", max_tokens=3))
    text_b = await (await client_b.get("/metrics")).text()
    text_a = await (await client_a.get("/metrics")).text()
    assert metric(text_a, "vllm:generation_tokens_total") == 3
    assert metric(text_b, "vllm:generation_tokens_total") == 0
