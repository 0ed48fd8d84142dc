"""The plain routes of the simulated node: health, models, metrics, tokenize, embeddings.

``/tokenize`` and ``/v1/embeddings`` are minimal but shaped like vLLM's, for pass-through
tests; they use the simulator's pseudo-tokenizer and deterministic fake vectors.
"""

from __future__ import annotations

import random
import time
import zlib
from collections.abc import Awaitable, Callable, Mapping

import orjson
from aiohttp import web

from sidecar.simulator.common.errors import ApiError
from sidecar.simulator.common.openai_wire import LlamaCppServer
from sidecar.simulator.engine.tokenizer import message_text, render_chat, token_id, tokenize
from sidecar.simulator.node.state import (
    BASE_HEADERS,
    JSON_HEADERS,
    NODE_KEY,
    Node,
    error_response,
    json_response,
    read_json,
)


async def health_route(request: web.Request) -> web.Response:
    return web.Response(status=200, headers=BASE_HEADERS)


async def models_route(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    created = int(time.time())
    data = [
        {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": name,
            "parent": None,
            "max_model_len": node.config.max_model_len,
            "permission": [
                {
                    "id": f"modelperm-{node.rng.getrandbits(64):016x}",
                    "object": "model_permission",
                    "created": created,
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }
        for name in node.behaviours.names
    ]
    return json_response(orjson.dumps({"object": "list", "data": data}))


async def metrics_route(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    return web.Response(
        body=node.metrics.exposition(),
        headers={**BASE_HEADERS, "content-type": node.metrics.content_type},
    )


def _prompt_of(body: object) -> str:
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    if isinstance(body.get("messages"), list):
        return render_chat(
            [m for m in body["messages"] if isinstance(m, dict)],
            add_generation_prompt=body.get("add_generation_prompt", True) is not False,
            continue_final_message=body.get("continue_final_message") is True,
            thinking=True,
        )
    prompt = body.get("prompt", body.get("input"))
    if isinstance(prompt, list):
        prompt = " ".join(message_text(p) if not isinstance(p, str) else p for p in prompt)
    if not isinstance(prompt, str):
        raise ApiError(400, "Either prompt or messages must be provided.", param="prompt")
    return prompt


async def tokenize_route(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    try:
        body = await read_json(request)
        tokens = tokenize(_prompt_of(body))
    except ApiError as err:
        return error_response(node, err)
    want_strs = isinstance(body, dict) and body.get("return_token_strs") is True
    payload = {
        "count": len(tokens),
        "max_model_len": node.config.max_model_len,
        "tokens": [token_id(t) for t in tokens],
        "token_strs": tokens if want_strs else None,
    }
    return json_response(orjson.dumps(payload))


def _check_model(node: Node, body: object) -> None:
    model = body.get("model") if isinstance(body, dict) else None
    if not node.behaviours.knows(str(model)):
        raise ApiError(
            404,
            f"The model `{model}` does not exist. "
            f"Valid aliases: {', '.join(node.behaviours.names)}.",
            "NotFoundError",
            "model",
        )


async def embeddings_route(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    try:
        body = await read_json(request)
        text = _prompt_of(body)
        _check_model(node, body)
    except ApiError as err:
        return error_response(node, err)
    tokens = tokenize(text)
    seed = zlib.crc32(text.encode())
    rng = random.Random(seed)  # noqa: S311 - a deterministic fake vector
    vector = [round(rng.uniform(-1.0, 1.0), 6) for _ in range(16)]
    payload = {
        "id": node.new_id("embd", request, None),
        "object": "list",
        "created": int(time.time()),
        "model": body["model"] if isinstance(body, dict) else "",
        "data": [{"index": 0, "object": "embedding", "embedding": vector}],
        "usage": {
            "prompt_tokens": len(tokens),
            "total_tokens": len(tokens),
            "completion_tokens": 0,
            "prompt_tokens_details": None,
        },
    }
    return json_response(orjson.dumps(payload))


def add_dialect_routes(app: web.Application, dialect: str) -> None:
    """The routes by which each server is recognised (``sidecar.dialects.detect``; Ollama's
    are its native API's, served by :mod:`sidecar.simulator.ollama`). ⚠ The bodies of
    ``/props`` and ``/get_model_info`` carry only a few of the real servers' fields."""
    if dialect == "vllm":
        app.router.add_get("/version", _json_route({"version": "0.32.0"}))
    elif dialect == "llamacpp":
        app.router.add_get("/props", _json_route({
            "default_generation_settings": {"n_ctx": 8192, "params": {"reasoning_format":
                                                                       "deepseek"}},
            "total_slots": 1, "model_path": "sim.gguf", "build_info": "b7000-sim"},
            LlamaCppServer.json_headers))
    elif dialect == "sglang":
        app.router.add_get("/get_model_info", _json_route({
            "model_path": "sim-qwen3", "tokenizer_path": "sim-qwen3", "is_generation": True}))


def _json_route(obj: object, headers: Mapping[str, str] = JSON_HEADERS,
                ) -> Callable[[web.Request], Awaitable[web.Response]]:
    body = orjson.dumps(obj)

    async def handler(_request: web.Request) -> web.Response:
        return json_response(body, headers=headers)

    return handler
