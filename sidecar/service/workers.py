"""``serve --workers N``: N processes sharing the listen port through ``SO_REUSEPORT``.

The supervisor (this module, in the main process) creates an empty
``PROMETHEUS_MULTIPROC_DIR``, starts N worker processes running ``serve`` with one
worker each, and then:

- tells systemd ``READY=1`` once every worker accepts connections;
- forwards SIGTERM/SIGINT (drain) and SIGHUP (reload) to every worker;
- if a worker dies unexpectedly, stops the others and exits 1, so systemd's
  ``Restart=on-failure`` starts a clean set.

Each worker has its own upstream connection pool and event loop; the metrics listener
of every worker serves the merged multiprocess view, so any of them answers a scrape.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from types import FrameType

from sidecar.config import Config, parse_host_port
from sidecar.service import sdnotify

WORKER_ENV = "RUNAWAY_SIDECAR_REUSE_PORT"
_START_TIMEOUT = 30.0


def run_workers(cfg: Config, argv: list[str]) -> int:
    """Start ``cfg.workers`` copies of ``serve`` and supervise them; return the exit code."""
    prom_dir = tempfile.mkdtemp(prefix="runaway-sidecar-metrics-")
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=prom_dir, **{WORKER_ENV: "1"})
    env.pop("NOTIFY_SOCKET", None)  # only the supervisor talks to systemd
    cmd = [sys.executable, "-m", "sidecar", *argv, "--workers", "1"]
    procs = [subprocess.Popen(cmd, env=env) for _ in range(cfg.workers)]  # noqa: S603
    stopping = False

    def forward(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        if signum in (signal.SIGTERM, signal.SIGINT):
            stopping = True
            sdnotify.stopping()
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    try:
        if _wait_listening(cfg.listen, procs):
            sdnotify.ready(f"{cfg.workers} workers proxying {cfg.listen} -> {cfg.upstream}")
        code = 0
        while any(p.poll() is None for p in procs):
            for proc in procs:
                rc = proc.poll()
                if rc is not None and rc != 0 and not stopping:
                    stopping, code = True, 1
                    forward(signal.SIGTERM, None)
            time.sleep(0.2)
        return code
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        shutil.rmtree(prom_dir, ignore_errors=True)


def _wait_listening(listen: str, procs: list[subprocess.Popen[bytes]]) -> bool:
    host, port = parse_host_port(listen)
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            return False
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.1)
    return False
