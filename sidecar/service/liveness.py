"""Proof that the event loops run: the systemd watchdog, and the heartbeats of ``--workers``.

One process: when the unit sets ``WatchdogSec=``, systemd passes ``WATCHDOG_USEC`` and the
event loop sends ``WATCHDOG=1`` every half of it (:func:`beat_of`, :func:`beat_every`). A
loop that stops running (a blocking call, a busy loop) stops sending, and systemd kills
the service after ``WatchdogSec`` and starts it again (``Restart=on-failure``).

``--workers N``: only the supervisor talks to systemd (``NotifyAccess=main``). Each worker
gets the write end of a pipe of its own (:data:`HEARTBEAT_FD_ENV`), and its event loop
writes one byte to it when its listeners are up, then every
:data:`HEARTBEAT_SECONDS_ENV` seconds (a quarter of the watchdog) when there is a
watchdog. The supervisor reads the pipes: it says ``READY=1`` once every worker has
written, and sends ``WATCHDOG=1`` every half watchdog, but only while every worker was
heard within the last half watchdog (:class:`Liveness`). A worker whose loop stops
stops its heartbeats, the supervisor stops pinging, and systemd restarts the service. A
byte per worker per heartbeat is the whole cost; no worker waits for an answer.

The other way round, every worker holds the read end of one more pipe, whose write end
only the supervisor holds and never writes (:data:`SUPERVISOR_FD_ENV`): when the
supervisor is gone (killed; outside systemd, which would stop the whole unit) the pipe
reads end-of-file, and the worker drains and exits (:func:`watch_supervisor`) rather than
keep the port with no one to stop it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sidecar.service import sdnotify

HEARTBEAT_FD_ENV = "RUNAWAY_SIDECAR_HEARTBEAT_FD"
HEARTBEAT_SECONDS_ENV = "RUNAWAY_SIDECAR_HEARTBEAT_SECONDS"
SUPERVISOR_FD_ENV = "RUNAWAY_SIDECAR_SUPERVISOR_FD"


@dataclass(frozen=True, slots=True)
class Beat:
    """How this process shows that its event loop runs: ``send`` once when it is ready,
    then every ``interval`` seconds (``None``: only once, readiness without a watchdog)."""

    send: Callable[[], object]
    interval: float | None


def beat_of(environ: Mapping[str, str] | None = None) -> Beat | None:
    """The beat of this process: heartbeats on the pipe its supervisor gave it (which this
    sets non-blocking), or ``WATCHDOG=1`` at half the systemd watchdog; ``None`` when
    neither applies."""
    env = os.environ if environ is None else environ
    fd = env.get(HEARTBEAT_FD_ENV, "")
    if fd.isdigit():
        pipe = int(fd)
        os.set_blocking(pipe, False)
        try:
            interval: float | None = float(env.get(HEARTBEAT_SECONDS_ENV, ""))
        except ValueError:
            interval = None
        if interval is not None and not 0 < interval < math.inf:
            interval = None
        return Beat(lambda: _heartbeat(pipe), interval)
    watchdog = sdnotify.watchdog_interval(env)
    if watchdog is None:
        return None
    return Beat(lambda: sdnotify.watchdog(env), watchdog / 2)


def watch_supervisor(gone: Callable[[], object],
                     environ: Mapping[str, str] | None = None) -> bool:
    """In a worker, call ``gone`` once its supervisor has exited (the pipe it handed over
    reads end-of-file); whether there is a supervisor to watch. Call from the event loop."""
    env = os.environ if environ is None else environ
    fd = env.get(SUPERVISOR_FD_ENV, "")
    if not fd.isdigit():
        return False
    pipe = int(fd)
    os.set_blocking(pipe, False)
    loop = asyncio.get_running_loop()

    def readable() -> None:
        try:
            if os.read(pipe, 64):
                return  # the supervisor never writes; nothing to act on
        except BlockingIOError:
            return
        except OSError:
            pass
        loop.remove_reader(pipe)
        gone()

    loop.add_reader(pipe, readable)
    return True


def _heartbeat(pipe: int) -> None:
    # A full pipe (the supervisor is not reading) or a closed one (it is gone) is no reason
    # to stop serving: the supervisor judges liveness by what it reads.
    with contextlib.suppress(OSError):
        os.write(pipe, b".")


async def beat_every(interval: float, send: Callable[[], object]) -> None:
    """Call ``send`` every ``interval`` seconds, from the event loop, until cancelled: the
    calls stop whenever the loop stops running."""
    while True:
        await asyncio.sleep(interval)
        send()


class Liveness:
    """The supervisor's view of its workers' heartbeats. Pure: the caller reads the clock.

    A worker is *ready* once heard at all, and *alive* when heard within ``window``
    seconds."""

    __slots__ = ("_heard", "_window")

    def __init__(self, workers: int, window: float) -> None:
        self._heard: list[float | None] = [None] * workers
        self._window = window

    def heard(self, worker: int, now: float) -> None:
        """Worker ``worker`` wrote at ``now``."""
        self._heard[worker] = now

    @property
    def all_ready(self) -> bool:
        """Every worker has written at least once (its listeners are up)."""
        return all(at is not None for at in self._heard)

    def alive(self, now: float) -> bool:
        """Every worker was heard within the window before ``now``."""
        return all(at is not None and now - at <= self._window for at in self._heard)
