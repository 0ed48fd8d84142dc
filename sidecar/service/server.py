"""Process lifecycle of ``serve``: listeners, signals, drain and reload.

- Binds the client listener (``listen``) and the metrics listener (``metrics_listen``), or
  serves the sockets systemd passed (``sidecar.service.activation``), then tells systemd
  ``READY=1`` (a worker tells its supervisor). From then on the event loop proves it runs
  (``sidecar.service.liveness``): ``WATCHDOG=1`` when the unit sets ``WatchdogSec=``, or
  heartbeats to the supervisor.
- SIGTERM/SIGINT: stop accepting connections (under socket activation new ones wait in
  the kernel's queue for the next process), serve the first request of connections
  accepted just before (:data:`ACCEPT_GRACE_SECONDS`), let in-flight streams finish for up
  to ``drain_timeout_seconds``, cancel what is left, exit 0.
- SIGHUP: reload the config (file, environment, the original flags); detector
  thresholds, modes, ladder and per-model settings apply to requests that start after
  it. A bad reload is logged and counted, and the old config stays. ``upstream`` and the
  listen addresses need a restart. A change of the config file itself triggers the same
  reload within ``config_watch_seconds`` (``sidecar.service.config_watch``).
- SIGUSR1: log one ``runtime_stats`` line (asyncio tasks, open client connections).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import os
import signal
from collections.abc import Callable
from pathlib import Path

import orjson
import structlog
from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CollectorRegistry

from sidecar import __version__
from sidecar.config import Config, parse_host_port
from sidecar.errors import ConfigError
from sidecar.net.proxy import Proxy
from sidecar.obs.logs import configure_logging
from sidecar.obs.metrics import Metrics
from sidecar.service import config_watch, liveness, sdnotify
from sidecar.service.activation import Inherited, describe
from sidecar.service.app import PROXY, make_app
from sidecar.service.health import make_metrics_app

log = structlog.get_logger("runaway_sidecar")

# aiohttp's default accept backlog (128) overflows when hundreds of clients connect at
# once, and the kernel then resets some of them; the kernel caps this at somaxconn.
_LISTEN_BACKLOG = 4096
#: After it stops accepting, how long a draining process still waits for the first request
#: of connections it accepted just before (their client had not sent it yet) rather than
#: closing them unanswered.
ACCEPT_GRACE_SECONDS = 0.25
#: Options read once, when the process starts (listeners, the upstream pools, the client
#: connection limits, the inbound API key): a reload that changes one is refused rather
#: than accepted and silently not applied.
RESTART_ONLY = ("upstream", "listen", "metrics_listen", "workers", "dialect",
                "upstream_keepalive_seconds", "upstream_connect_timeout_seconds",
                "upstream_read_timeout_seconds", "client_header_timeout_seconds",
                "max_header_bytes", "api_key", "config_watch_seconds")


def restart_needed(current: Config, new: Config) -> str:
    """Why ``new`` cannot be applied by a reload ("" when it can)."""
    changed = [k for k in RESTART_ONLY if getattr(new, k) != getattr(current, k)]
    return f"key '{changed[0]}': changing it needs a restart" if changed else ""


def debug_policy_handler(proxy: Proxy) -> Handler:
    """Read-only view of the thinking policy: rules in order, adaptive budgets, memory."""

    async def handler(_request: web.Request) -> web.Response:
        cfg = proxy.config.policy
        body = {
            "rules": [dataclasses.asdict(rule) for rule in proxy.policy.rules],
            "presets": list(cfg.presets),
            "adaptive_budget": cfg.adaptive_budget,
            **proxy.fleet.snapshot(),
        }
        return web.Response(body=orjson.dumps(body, default=dict),
                            content_type="application/json")

    return handler


async def run_server(
    cfg: Config,
    reload_config: Callable[[], Config],
    *,
    reuse_port: bool = False,
    registry: CollectorRegistry | None = None,
    inherited: Inherited | None = None,
    config_file: Path | None = None,
) -> int:
    """Serve until SIGTERM/SIGINT; return the exit code. ``inherited`` holds the listening
    sockets passed by systemd (or a supervisor), served instead of binding the addresses.
    ``config_file`` (the ``--config`` file) is watched for changes every
    ``config_watch_seconds``."""
    inherited = inherited or Inherited()
    configure_logging(cfg.log_format, cfg.log_level)
    registry = registry or CollectorRegistry()
    metrics = Metrics(registry, cfg.model_allowlist, __version__)
    app = make_app(cfg, metrics)
    proxy = app[PROXY]
    runner = web.AppRunner(app, handler_cancellation=True,
                           shutdown_timeout=cfg.drain_timeout_seconds, access_log=None)
    await runner.setup()
    site: web.BaseSite
    if inherited.listen is not None:
        site = web.SockSite(runner, inherited.listen, backlog=_LISTEN_BACKLOG)
    else:
        host, port = parse_host_port(cfg.listen)
        site = web.TCPSite(runner, host, port, reuse_port=reuse_port or None,
                           backlog=_LISTEN_BACKLOG)
    await site.start()
    metrics_runner = web.AppRunner(
        make_metrics_app(registry, proxy.upstream_ready,
                         extra_routes=[web.get("/debug/policy", debug_policy_handler(proxy))]),
        access_log=None)
    await metrics_runner.setup()
    if inherited.metrics is not None:
        await web.SockSite(metrics_runner, inherited.metrics).start()
    else:
        mhost, mport = parse_host_port(cfg.metrics_listen, "metrics_listen")
        await web.TCPSite(metrics_runner, mhost, mport, reuse_port=reuse_port or None).start()

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    current = [cfg]
    watched = config_watch.WatchedFile(config_file) if config_file is not None else None

    def reload() -> None:
        sdnotify.reloading()
        if watched is not None:
            watched.mark()  # what this reload reads is no change for the watcher
        new: Config | None
        try:
            new = reload_config()
        except ConfigError as exc:
            new, problem = None, str(exc)
        else:
            problem = restart_needed(current[0], new)
        if new is None or problem:
            metrics.reload("error")
            log.error("config_reload_failed", error=problem)
        else:
            proxy.reconfigure(new)
            current[0] = new
            metrics.reload("ok")
            log.info("config_reloaded", mode=new.mode,
                     detectors=dataclasses.asdict(new.detectors))
        sdnotify.ready("reloaded")

    def runtime_stats() -> None:
        # For soak tests and operators: leaks show as counts that do not come back down.
        server = runner.server
        log.info("runtime_stats", pid=os.getpid(), asyncio_tasks=len(asyncio.all_tasks(loop)),
                 client_connections=len(server.connections) if server else 0,
                 gc_frozen=gc.get_freeze_count(),
                 gc_collections=[gen["collections"] for gen in gc.get_stats()])

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, reload)
    loop.add_signal_handler(signal.SIGUSR1, runtime_stats)
    listen = describe(inherited.listen) if inherited.listen is not None else cfg.listen
    metrics_listen = (describe(inherited.metrics) if inherited.metrics is not None
                      else cfg.metrics_listen)
    log.info("listening", listen=listen, metrics_listen=metrics_listen,
             socket_activated=sorted(inherited.fds().values()), upstream=cfg.upstream,
             mode=cfg.mode, version=__version__)
    sdnotify.ready(f"proxying {listen} -> {cfg.upstream}")
    beat = liveness.beat_of()
    background: list[asyncio.Task[None]] = []
    if beat is not None:
        beat.send()  # a worker's first heartbeat tells its supervisor it is ready
        if beat.interval is not None:
            background.append(asyncio.create_task(liveness.beat_every(beat.interval,
                                                                      beat.send)))

    def supervisor_gone() -> None:
        log.warning("supervisor_gone", pid=os.getpid())  # then drain and exit
        stop.set()

    liveness.watch_supervisor(supervisor_gone)
    if watched is not None and cfg.config_watch_seconds > 0:
        background.append(asyncio.create_task(
            config_watch.watch(watched, cfg.config_watch_seconds, reload)))
    await stop.wait()
    sdnotify.stopping()
    log.info("draining", timeout_s=cfg.drain_timeout_seconds)
    proxy.draining = True
    await site.stop()  # no new connections from here on
    await asyncio.sleep(ACCEPT_GRACE_SECONDS)
    await runner.cleanup()
    await metrics_runner.cleanup()
    for task in background:
        task.cancel()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
        loop.remove_signal_handler(sig)
    log.info("stopped")
    return 0
