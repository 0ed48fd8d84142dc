"""The proxy: the sidecar's request handlers in front of one upstream, and their lifecycle.

:class:`Proxy` holds what the handlers share and swaps it on a reload: the config, the
thinking policy and the upstream's dialect (probed once with ``dialect = "auto"``). Two
kinds of routes (``sidecar.service.app`` adds them):

- watched, one per registered wire API (``sidecar.apis.REGISTRY``): the upstream stream
  is decoded and fed to the detectors while its original bytes are forwarded; on a
  verdict the handler leaves the upstream response (closing the connection, so vLLM
  aborts the request and frees its KV cache) and walks the reissue ladder. Where each
  part of that lives:

  - ``sidecar.net.runner``: the exchange, from the client's body to its end;
  - ``sidecar.net.pump``: one upstream attempt's read loop and its timers;
  - ``sidecar.net.upstream``: the watched requests' upstream connections;
  - ``sidecar.net.sinks``: the client's response, a stream or one body;
  - ``sidecar.net.client``: the client's body and the sidecar's own error responses;
  - ``sidecar.net.accounting``: the metrics and log lines;
  - ``sidecar.net.fleet``: the runaway memory and adaptive budgets (optionally Redis);

- pass-through, for every method and path that is not watched
  (``sidecar.net.relay``): status, headers (minus hop-by-hop) and body are relayed as they
  arrive, in both directions.

Everything that decides lives in pure modules: what a request asks and what bodies it
sends (its wire API, ``sidecar.apis``; ``sidecar.core.prepare``), what a chunk means and
which bytes a splice writes (the API's attempt and splicer), the plan before the first
token (``sidecar.core.plan``) and what follows each attempt (``sidecar.core.ladder``).
The I/O layer carries those decisions out: it moves bytes, runs timers and counts.

Cutting always means leaving the ``async with`` block that owns the upstream response.
A client disconnect cancels the handler (``handler_cancellation=True``), which leaves
that block the same way.
"""

from __future__ import annotations

import asyncio
import functools

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler

from sidecar.config import Config
from sidecar.core.wire import WireApi
from sidecar.dialects import DIALECTS, PROBES, detect, effective_config
from sidecar.net.fleet import Fleet
from sidecar.net.relay import Relay
from sidecar.net.runner import Runner
from sidecar.net.upstream import UpstreamPool
from sidecar.obs.metrics import Metrics
from sidecar.policy.rules import Policy, rules_of
from sidecar.traces.recorder import Recorder

log = structlog.get_logger("runaway_sidecar")


class Proxy:
    """Request handlers bound to one upstream and one config (swapped on reload)."""

    def __init__(self, config: Config, metrics: Metrics) -> None:
        self.dialect = DIALECTS["vllm" if config.dialect == "auto" else config.dialect]
        self.config = effective_config(config, self.dialect)
        self.metrics = metrics
        self.fleet = Fleet(config, metrics)
        self.policy = Policy(rules_of(config.policy.rules, config.policy.presets))
        self.draining = False
        self._base = config.upstream.rstrip("/")
        self._relay = Relay(self._base, metrics)
        # Watched requests: their own connections and HTTP/1.1 reader (``sidecar.net.upstream``)
        # and their own read timeout (``sidecar.net.pump``).
        self._upstream = UpstreamPool(
            self._base, self.config.upstream_connect_timeout_seconds,
            self.config.upstream_keepalive_seconds,
            on_retry=lambda: metrics.upstream_retry("watched"))
        # ``[record]``: None unless a directory is set (it stays until a restart).
        self.recorder = Recorder.start(config, metrics)
        self._runner = Runner(self, self._upstream, self.fleet, self._relay, metrics,
                              self.recorder)

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Open the pass-through routes' upstream client (``sidecar.net.relay``; one per
        process), then, with ``dialect = "auto"``, probe the upstream. The watched
        requests' pool (``sidecar.net.upstream``) opens connections as it needs them."""
        await self._relay.start(self.config)
        if self.config.dialect == "auto":
            await self._detect_dialect()

    async def _detect_dialect(self) -> None:
        """``dialect = "auto"``: probe the upstream once and keep what it looks like."""
        found = detect({path: await self._relay.probe(path) for path in PROBES})
        self.dialect = found.dialect
        self.config = effective_config(self.config, self.dialect)
        (log.info if found.certain else log.warning)(
            "dialect_detected", dialect=found.dialect.name, server=found.dialect.server,
            evidence=found.evidence, upstream=self._base)

    async def close(self) -> None:
        """Close the upstream pools and the fleet memory's Redis pool, and let the trace
        recorder write what it holds."""
        await self._relay.close()
        self._upstream.close()
        await self.fleet.close()
        if self.recorder is not None:
            # Writes the samples still held and what is queued (bounded): off the loop.
            await asyncio.to_thread(self.recorder.close)

    def reconfigure(self, config: Config) -> None:
        """Take a reloaded config for requests that start from now on. The upstream, the
        runaway memory and the adaptive budgets (and their Redis) stay as they were, and so
        does the upstream dialect."""
        self.config = effective_config(config, self.dialect)
        self.policy = Policy(rules_of(config.policy.rules, config.policy.presets))

    async def upstream_ready(self) -> bool:
        """Readiness: the upstream answered its dialect's health path with a 2xx."""
        return await self._relay.ready(self.dialect.health_path)

    # -- routes ----------------------------------------------------------------------

    def handler(self, api: WireApi) -> Handler:
        """The request handler of a watched API's route (``sidecar.net.runner``)."""
        return functools.partial(self._runner.watched, api=api)

    async def passthrough(self, request: web.Request) -> web.StreamResponse:
        """The handler of every other route: relay the request as it is."""
        return await self._relay.relay(request, self.config)
