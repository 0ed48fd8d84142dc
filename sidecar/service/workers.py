"""``serve --workers N``: N processes serving one listen port.

The supervisor (this module, in the main process) creates an empty
``PROMETHEUS_MULTIPROC_DIR``, starts N worker processes running ``serve`` with one
worker each, and then:

- shares the port: the socket systemd passed (socket activation), which every worker
  inherits and accepts on; otherwise each worker binds ``listen`` with ``SO_REUSEPORT``;
- tells systemd ``READY=1`` once every worker's listeners are up (each says so on its
  heartbeat pipe, ``sidecar.service.liveness``);
- sends ``WATCHDOG=1`` (when the unit sets ``WatchdogSec=``) only while every worker's
  event loop keeps writing heartbeats;
- forwards SIGTERM/SIGINT (drain), SIGHUP (reload) and SIGUSR1 (runtime stats) to every
  worker;
- if a worker dies unexpectedly, stops the others and exits 1, so systemd's
  ``Restart=on-failure`` starts a clean set; if the supervisor itself is killed, its
  workers see it (``sidecar.service.liveness``) and drain and exit.

Each worker has its own upstream connection pool and event loop; the metrics listener
of every worker serves the merged multiprocess view, so any of them answers a scrape.
"""

from __future__ import annotations

import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from types import FrameType

from sidecar.config import Config
from sidecar.service import activation, liveness, sdnotify
from sidecar.service.activation import Inherited

WORKER_ENV = "RUNAWAY_SIDECAR_REUSE_PORT"
#: Longest wait between two looks at the workers (exits, heartbeats, the watchdog).
_TICK = 0.2
#: What only the supervisor may see: systemd's notify socket and watchdog.
_SUPERVISOR_ONLY = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


def run_workers(cfg: Config, argv: list[str], inherited: Inherited | None = None) -> int:
    """Start ``cfg.workers`` copies of ``serve`` and supervise them; return the exit code.
    ``inherited`` holds the sockets systemd passed, handed to every worker."""
    inherited = inherited or Inherited()
    watchdog = sdnotify.watchdog_interval()
    prom_dir = tempfile.mkdtemp(prefix="runaway-sidecar-metrics-")
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=prom_dir, **{WORKER_ENV: "1"},
               **activation.worker_env(inherited))
    for key in _SUPERVISOR_ONLY:
        env.pop(key, None)
    if watchdog is not None:
        env[liveness.HEARTBEAT_SECONDS_ENV] = repr(watchdog / 4)
    cmd = [sys.executable, "-m", "sidecar", *argv, "--workers", "1"]
    # Every worker reads this pipe; only this process holds the write end, so the workers
    # see end-of-file when it is gone, and drain and exit.
    lifeline, held = os.pipe()
    env[liveness.SUPERVISOR_FD_ENV] = str(lifeline)
    procs: list[subprocess.Popen[bytes]] = []
    pipes: dict[int, int] = {}  # read end -> worker index
    for i in range(cfg.workers):
        read_end, write_end = os.pipe()
        procs.append(subprocess.Popen(  # noqa: S603
            cmd, env={**env, liveness.HEARTBEAT_FD_ENV: str(write_end)},
            pass_fds=(write_end, lifeline, *inherited.fds())))
        os.close(write_end)
        os.set_blocking(read_end, False)
        pipes[read_end] = i
    os.close(lifeline)
    stopping = False

    def forward(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        if signum in (signal.SIGTERM, signal.SIGINT):
            stopping = True
            sdnotify.stopping()
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(sig, forward)
    # A worker is alive while heard within half the watchdog; it writes every quarter.
    live = liveness.Liveness(cfg.workers, watchdog / 2 if watchdog else math.inf)
    tick = min(_TICK, watchdog / 4) if watchdog else _TICK
    ready = False
    next_ping = 0.0
    try:
        code = 0
        while any(p.poll() is None for p in procs):
            readable, _, _ = select.select(list(pipes), [], [], tick)
            now = time.monotonic()
            for read_end in readable:
                try:
                    data = os.read(read_end, 4096)
                except BlockingIOError:
                    continue
                if data:
                    live.heard(pipes[read_end], now)
                else:  # the worker exited (its exit is handled below)
                    os.close(read_end)
                    del pipes[read_end]
            for proc in procs:
                rc = proc.poll()
                if rc is not None and rc != 0 and not stopping:
                    stopping, code = True, 1
                    forward(signal.SIGTERM, None)
            if not ready and not stopping and live.all_ready:
                ready = True
                sdnotify.ready(f"{cfg.workers} workers proxying -> {cfg.upstream}")
            if watchdog is not None and ready and now >= next_ping and live.alive(now):
                sdnotify.watchdog()
                next_ping = now + watchdog / 2
        return code
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        for read_end in pipes:
            os.close(read_end)
        os.close(held)
        shutil.rmtree(prom_dir, ignore_errors=True)
