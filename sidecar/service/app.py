"""The application factory: ``make_app(config, metrics)``; no singletons. A route for
each watched wire API in ``sidecar.apis.REGISTRY``, pass-through for everything else.

Tests build as many apps as they like, each with its own metrics registry and
upstream pool. The proxy object is reachable through the typed key ``PROXY``.
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from sidecar.apis import REGISTRY, api_for_path
from sidecar.config import Config
from sidecar.errors import error_body
from sidecar.net.proxy import Proxy
from sidecar.obs.metrics import Metrics

PROXY = web.AppKey("proxy", Proxy)


def make_app(config: Config, metrics: Metrics) -> web.Application:
    """The client-facing application: watched routes plus pass-through for the rest."""
    # The body limit is enforced by the watched handlers themselves (413 with a JSON
    # error); pass-through bodies are streamed, so aiohttp's own limit is not used.
    app = web.Application(client_max_size=config.max_body_bytes, handler_args={
        # aiohttp arms its keep-alive timer when a connection opens and clears it only
        # once a request head is parsed: it is the header timeout (slowloris) too.
        "keepalive_timeout": config.client_header_timeout_seconds,
        "max_line_size": config.max_header_bytes,
        "max_field_size": config.max_header_bytes,
    })
    proxy = Proxy(config, metrics)
    app[PROXY] = proxy

    async def upstream_pool(_app: web.Application) -> AsyncIterator[None]:
        await proxy.start()
        yield
        await proxy.close()

    app.cleanup_ctx.append(upstream_pool)
    if config.api_key is not None:
        app.middlewares.append(_api_key_middleware(config.api_key))
    for api in REGISTRY:
        # Ollama's native API only in front of Ollama. With "auto" the routes exist before
        # the probe has run; the handlers pass the request through unless it found Ollama.
        if not api.ollama_native or proxy.dialect.native_ndjson or config.dialect == "auto":
            app.router.add_post(api.path, proxy.handler(api))
    app.router.add_route("*", "/{tail:.*}", proxy.passthrough)
    return app


def _api_key_middleware(key: str) -> Middleware:
    """Clients must send the key as ``Authorization: Bearer KEY`` (OpenAI's clients) or
    ``x-api-key: KEY`` (Anthropic's); a refusal is a 401 in the shape of the path's API."""
    bearer, plain = f"Bearer {key}".encode(), key.encode()

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        given = request.headers.get("Authorization", "").encode()
        other = request.headers.get("x-api-key", "").encode()
        # Both compared every time: the time taken says nothing about which one was sent.
        ok_bearer = hmac.compare_digest(given, bearer)
        ok_plain = hmac.compare_digest(other, plain)
        if not (ok_bearer or ok_plain):
            api = api_for_path(request.path)
            message, kind = "invalid or missing API key", "AuthenticationError"
            body = (api.error_body(401, message, kind) if api is not None
                    else error_body(message, kind, 401))
            return web.Response(status=401, content_type="application/json", body=body)
        response: web.StreamResponse = await handler(request)
        return response

    return check
