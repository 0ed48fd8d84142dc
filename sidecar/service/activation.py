"""Listening sockets handed over by systemd socket activation (``sd_listen_fds(3)``), without
libsystemd.

A ``.socket`` unit owns the port, so it stays open while the service restarts: connections
that arrive meanwhile wait in the kernel's accept queue and are served by the next process.
systemd starts the service with the sockets as file descriptors 3, 4, ... and says so in
the environment: ``LISTEN_PID`` (the process they are for), ``LISTEN_FDS`` (how many) and
``LISTEN_FDNAMES`` (their ``FileDescriptorName=``, colon-separated).

Roles, by name: the socket named ``metrics`` (if any) serves ``/metrics``, ``/healthz`` and
``/readyz``; the one other socket serves clients. Without a passed socket ``serve`` binds
``listen`` and ``metrics_listen`` itself, as before.

``serve --workers N``: the supervisor takes the sockets and hands the same ones to every
worker, at the same descriptor numbers, naming them in :data:`WORKER_FDS_ENV` (a worker's
pid is not known before it starts, so ``LISTEN_PID`` cannot be set for it). Every worker then
accepts on the one inherited socket.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

from sidecar.errors import ConfigError

#: The first passed descriptor (``SD_LISTEN_FDS_START``).
FIRST_FD = 3
#: ``name=fd,name=fd``: the sockets a supervisor hands to its workers.
WORKER_FDS_ENV = "RUNAWAY_SIDECAR_LISTEN_FDS"
_SYSTEMD_VARS = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")
METRICS_NAME = "metrics"


def passed_fds(environ: Mapping[str, str], pid: int) -> dict[int, str]:
    """The descriptors passed to process ``pid``, by number, with their names (``""`` when
    unnamed); empty when none were. Raises :class:`ConfigError` for a malformed environment."""
    handed = environ.get(WORKER_FDS_ENV)
    if handed is not None:
        out: dict[int, str] = {}
        for item in filter(None, handed.split(",")):
            name, _, fd = item.rpartition("=")
            if not fd.isdigit():
                raise ConfigError(f"{WORKER_FDS_ENV}: expected name=fd pairs, got {handed!r}")
            out[int(fd)] = name
        return out
    if environ.get("LISTEN_PID") != str(pid):
        return {}  # unset, or meant for another process (systemd's rule)
    count = environ.get("LISTEN_FDS", "")
    if not count.isdigit():
        raise ConfigError(f"LISTEN_FDS: expected a number, got {count!r}")
    n = int(count)
    names = environ.get("LISTEN_FDNAMES", "").split(":")
    if len(names) != n:
        names = [""] * n
    return {FIRST_FD + i: names[i] for i in range(n)}


@dataclass(frozen=True, slots=True)
class Inherited:
    """The passed sockets by role; ``None`` where ``serve`` binds its own."""

    listen: socket.socket | None = None
    metrics: socket.socket | None = None

    def fds(self) -> dict[int, str]:
        """The descriptors by number, with their role, for :data:`WORKER_FDS_ENV`."""
        out = {}
        if self.listen is not None:
            out[self.listen.fileno()] = "listen"
        if self.metrics is not None:
            out[self.metrics.fileno()] = METRICS_NAME
        return out


def inherit(environ: MutableMapping[str, str] | None = None,
            pid: int | None = None) -> Inherited:
    """Take the sockets passed to this process (see :func:`passed_fds`) and remove the
    variables that passed them from ``environ`` (default :data:`os.environ`), so that no
    child mistakes them for its own. Raises :class:`ConfigError` when a descriptor is not a
    listening stream socket, or when more than one socket would serve clients."""
    env = os.environ if environ is None else environ
    fds = passed_fds(env, os.getpid() if pid is None else pid)
    for key in (*_SYSTEMD_VARS, WORKER_FDS_ENV):
        env.pop(key, None)
    listen: list[socket.socket] = []
    metrics: list[socket.socket] = []
    for fd, name in sorted(fds.items()):
        (metrics if name == METRICS_NAME else listen).append(_listening(fd, name))
    if len(listen) > 1 or len(metrics) > 1:
        for sock in (*listen, *metrics):
            sock.detach()  # left open, as found
        raise ConfigError(
            f"LISTEN_FDS: {len(fds)} sockets passed; expected one for clients and at most "
            f"one more named {METRICS_NAME!r} (FileDescriptorName=)")
    return Inherited(listen[0] if listen else None, metrics[0] if metrics else None)


def worker_env(inherited: Inherited) -> dict[str, str]:
    """The environment entry that hands ``inherited`` to a worker (empty when nothing was
    inherited)."""
    fds = inherited.fds()
    if not fds:
        return {}
    return {WORKER_FDS_ENV: ",".join(f"{name}={fd}" for fd, name in sorted(fds.items()))}


def _listening(fd: int, name: str) -> socket.socket:
    """The socket at ``fd``, checked to be a listening stream socket."""
    label = f"LISTEN_FDS: descriptor {fd}" + (f" ({name})" if name else "")
    try:
        sock = socket.socket(fileno=fd)
    except OSError as exc:
        raise ConfigError(f"{label} is not a socket: {exc.strerror}") from None
    try:
        accepting = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
    except OSError as exc:
        sock.detach()
        raise ConfigError(f"{label}: {exc.strerror}") from None
    if sock.type != socket.SOCK_STREAM or not accepting:
        sock.detach()
        raise ConfigError(f"{label} is not a listening stream socket (ListenStream=)")
    sock.setblocking(False)
    sock.set_inheritable(False)  # ``pass_fds`` hands it to workers; nothing else inherits it
    return sock


def describe(sock: socket.socket) -> str:
    """``host:port`` (or the path) a passed socket listens on, for the logs."""
    address = sock.getsockname()
    if isinstance(address, tuple):
        host, port = address[0], address[1]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return str(address)
