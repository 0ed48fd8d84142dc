"""sd_notify(3) without libsystemd: one datagram to ``$NOTIFY_SOCKET`` per state change.

With ``Type=notify`` systemd considers the service started only when it receives
``READY=1``, so ``systemctl start`` returns once the listeners are bound. The main
process (never a worker: the unit has ``NotifyAccess=main``) sends:

- ``READY=1`` after the listeners are bound, and again after each reload;
- ``RELOADING=1`` with ``MONOTONIC_USEC`` when a SIGHUP reload begins;
- ``STOPPING=1`` when a SIGTERM drain begins;
- ``STATUS=...`` free text shown by ``systemctl status``;
- ``WATCHDOG=1`` every :func:`watchdog_interval` / 2 seconds when the unit sets
  ``WatchdogSec=`` (deploy's unit does), from the event loop (``sidecar.service.liveness``;
  under ``--workers`` from the supervisor, while every worker's loop beats).

Every function returns whether the datagram was sent and never raises: outside
systemd (``NOTIFY_SOCKET`` unset) it does nothing, and a failure to notify must not
take the proxy down. The socket is non-blocking, so a full queue cannot stall the
event loop.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping

__all__ = [
    "notify",
    "ready",
    "reloading",
    "status",
    "stopping",
    "watchdog",
    "watchdog_interval",
]


def _address(value: str) -> str | None:
    if value.startswith("@"):
        return "\0" + value[1:]  # Linux abstract namespace
    if value.startswith("/"):
        return value
    return None  # vsock:/relative addresses are not used by systemd for services


def notify(state: str, environ: Mapping[str, str] | None = None) -> bool:
    """Send ``state`` (newline-separated ``KEY=VALUE`` pairs) to the notify socket.

    ``environ`` defaults to :data:`os.environ`; tests pass their own.
    """
    env = os.environ if environ is None else environ
    address = _address(env.get("NOTIFY_SOCKET", ""))
    if address is None:
        return False
    try:
        payload = state.encode()
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            sock.sendto(payload, address)
    except (OSError, UnicodeError, ValueError):
        return False
    return True


def ready(status_text: str | None = None, environ: Mapping[str, str] | None = None) -> bool:
    """``READY=1``, optionally with a ``STATUS=`` line."""
    state = "READY=1" if status_text is None else f"READY=1\nSTATUS={_one_line(status_text)}"
    return notify(state, environ)


def reloading(environ: Mapping[str, str] | None = None) -> bool:
    """``RELOADING=1`` with the ``MONOTONIC_USEC`` timestamp systemd expects with it.

    Follow with :func:`ready` when the reload is done (accepted or rejected).
    """
    usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    return notify(f"RELOADING=1\nMONOTONIC_USEC={usec}", environ)


def stopping(environ: Mapping[str, str] | None = None) -> bool:
    """``STOPPING=1``: the drain has begun."""
    return notify("STOPPING=1", environ)


def status(text: str, environ: Mapping[str, str] | None = None) -> bool:
    """``STATUS=text`` (newlines become spaces: the protocol is line-based)."""
    return notify(f"STATUS={_one_line(text)}", environ)


def watchdog(environ: Mapping[str, str] | None = None) -> bool:
    """``WATCHDOG=1``: the keep-alive ping."""
    return notify("WATCHDOG=1", environ)


def watchdog_interval(environ: Mapping[str, str] | None = None) -> float | None:
    """The watchdog timeout in seconds, or ``None`` when no watchdog applies to this
    process (``WATCHDOG_USEC`` unset or invalid, or ``WATCHDOG_PID`` names another one)."""
    env = os.environ if environ is None else environ
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
        pid = env.get("WATCHDOG_PID")
        if pid is not None and int(pid) != os.getpid():
            return None
    except ValueError:
        return None
    return usec / 1_000_000 if usec > 0 else None


def _one_line(text: str) -> str:
    return " ".join(text.splitlines())
