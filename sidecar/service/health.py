"""The metrics listener: ``/metrics``, ``/healthz`` and ``/readyz`` on their own port.

It is a separate aiohttp application (default ``127.0.0.1:9464``, bound by the CLI) so
that ``/metrics`` on the node's main port still reaches vLLM's own metrics.

- ``GET /metrics``: the Prometheus exposition (merged across workers in
  multiprocess mode, see :func:`sidecar.obs.exposition.exposition`).
- ``GET /healthz``: 200 while the process runs its event loop. Liveness only; it never
  looks at the upstream, so a vLLM restart does not get the sidecar restarted too.
- ``GET /readyz``: 200 when the ``readiness`` callback returns ``True``, else 503. The
  callback is given :data:`READINESS_TIMEOUT_SECONDS`; a timeout or an exception counts
  as not ready. The proxy's callback says the upstream answered ``/health`` (see
  :func:`upstream_probe`) and that no drain is under way.

More routes (``/debug/policy`` later) are passed in as ``extra_routes``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Final

import aiohttp
import structlog
from aiohttp import web
from prometheus_client import CollectorRegistry

from sidecar.obs.exposition import exposition

__all__ = ["READINESS_TIMEOUT_SECONDS", "Readiness", "make_metrics_app", "upstream_probe"]

Readiness = Callable[[], Awaitable[bool]]
READINESS_TIMEOUT_SECONDS: Final = 2.0

_log = structlog.get_logger(__name__)


def make_metrics_app(
    registry: CollectorRegistry,
    readiness: Readiness,
    *,
    extra_routes: Iterable[web.AbstractRouteDef] = (),
    readiness_timeout: float = READINESS_TIMEOUT_SECONDS,
) -> web.Application:
    """Build the metrics-listener application (see the module docstring)."""

    async def metrics(_request: web.Request) -> web.Response:
        body, content_type = exposition(registry)
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_request: web.Request) -> web.Response:
        try:
            async with asyncio.timeout(readiness_timeout):
                ready = await readiness()
        except TimeoutError:
            _log.warning("readiness_timeout", timeout_s=readiness_timeout)
            ready = False
        except Exception as exc:  # noqa: BLE001  (a probe bug must read as "not ready")
            _log.warning("readiness_error", error=repr(exc))
            ready = False
        if ready:
            return web.Response(text="ready\n")
        return web.Response(status=503, text="not ready\n")

    app = web.Application()
    app.add_routes(
        [
            web.get("/metrics", metrics),
            web.get("/healthz", healthz),
            web.get("/readyz", readyz),
            *extra_routes,
        ]
    )
    return app


def upstream_probe(
    session: aiohttp.ClientSession, upstream: str, timeout: float = READINESS_TIMEOUT_SECONDS
) -> Readiness:
    """A readiness callback: ``True`` when ``GET {upstream}/health`` answers 200.

    ``session`` is the proxy's client session; the probe reads no body beyond the
    status line and never raises.
    """
    url = upstream.rstrip("/") + "/health"
    client_timeout = aiohttp.ClientTimeout(total=timeout)

    async def probe() -> bool:
        try:
            async with session.get(url, timeout=client_timeout, allow_redirects=False) as resp:
                return resp.status == 200
        except (aiohttp.ClientError, TimeoutError, OSError):
            return False

    return probe
