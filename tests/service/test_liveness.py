"""The event loop's proof of life: watchdog pings that stop when the loop blocks, and the
supervisor's view of its workers' heartbeats."""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from sidecar.service import liveness

# Linux (asm-generic) value of SO_TIMESTAMPNS, which Python 3.11's socket module lacks; the
# control message carrying the time has the same number (SCM_TIMESTAMPNS).
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)


@pytest.fixture
def notify() -> Iterator[tuple[dict[str, str], list[tuple[float, bytes]]]]:
    """A notify socket (abstract name) whose datagrams a thread collects with the time the
    kernel received each (``SO_TIMESTAMPNS``, wall clock), so that they are timed exactly
    even while the test's event loop is blocked."""
    name = f"runaway-sidecar-test-{os.getpid()}-{time.monotonic_ns()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.settimeout(0.05)
    got: list[tuple[float, bytes]] = []
    done = threading.Event()
    stamp = socket.CMSG_SPACE(struct.calcsize("qq"))

    def read() -> None:
        while not done.is_set():
            try:
                data, ancdata, _flags, _addr = sock.recvmsg(64, stamp)
            except TimeoutError:
                continue
            for level, kind, value in ancdata:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = struct.unpack("qq", value[:16])
                    got.append((sec + nsec / 1e9, data))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    yield {"NOTIFY_SOCKET": "@" + name, "WATCHDOG_USEC": "100000"}, got
    done.set()
    reader.join(timeout=5)
    sock.close()


async def until(condition: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline
        await asyncio.sleep(0.005)


async def test_a_blocked_event_loop_stops_the_watchdog_pings(
        notify: tuple[dict[str, str], list[tuple[float, bytes]]]) -> None:
    """With ``WATCHDOG_USEC`` set (``WatchdogSec=``), the event loop sends ``WATCHDOG=1``
    every half of it; while a call blocks the loop no ping goes out (so systemd restarts a
    stuck service), and they resume when the loop runs again."""
    env, got = notify
    beat = liveness.beat_of(env)
    assert beat is not None
    assert beat.interval == pytest.approx(0.05)
    task = asyncio.create_task(liveness.beat_every(beat.interval, beat.send))
    try:
        await until(lambda: len(got) >= 3)
        blocked_at = time.time()
        time.sleep(0.4)  # a blocking call on the event loop
        unblocked_at = time.time()
        await until(lambda: sum(at > unblocked_at for at, _ in got) >= 3)
    finally:
        task.cancel()
    assert {data for _, data in got} == {b"WATCHDOG=1"}
    assert not [at for at, _ in got if blocked_at < at < unblocked_at]
    before = [at for at, _ in got if at <= blocked_at]
    assert max(b - a for a, b in itertools.pairwise(before)) < 0.3


def test_no_watchdog_no_beat() -> None:
    """Outside systemd's watchdog, and without a supervisor's pipe, nothing beats."""
    assert liveness.beat_of({}) is None
    assert liveness.beat_of({"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"}) is None


def test_a_worker_beats_on_its_supervisors_pipe() -> None:
    """A worker writes one byte per beat to the pipe its supervisor gave it, at the
    interval it was given (none: readiness only); a supervisor gone does not stop it."""
    read_end, write_end = os.pipe()
    try:
        beat = liveness.beat_of({liveness.HEARTBEAT_FD_ENV: str(write_end),
                                 liveness.HEARTBEAT_SECONDS_ENV: "0.25"})
        assert beat is not None
        assert beat.interval == 0.25
        beat.send()
        beat.send()
        assert os.read(read_end, 16) == b".."
        once = liveness.beat_of({liveness.HEARTBEAT_FD_ENV: str(write_end)})
        assert once is not None
        assert once.interval is None
        os.close(read_end)
        read_end = -1
        beat.send()  # EPIPE: ignored
    finally:
        for fd in (read_end, write_end):
            if fd >= 0:
                os.close(fd)


async def test_a_worker_sees_its_supervisor_go() -> None:
    """A worker's lifeline reads end-of-file once its supervisor (the only holder of the
    write end) is gone, and only then is it told; a process without one watches nothing."""
    read_end, write_end = os.pipe()
    gone = asyncio.Event()
    try:
        assert liveness.watch_supervisor(gone.set, {liveness.SUPERVISOR_FD_ENV: str(read_end)})
        await asyncio.sleep(0.05)
        assert not gone.is_set()
        os.close(write_end)
        write_end = -1
        await asyncio.wait_for(gone.wait(), 5)
    finally:
        for fd in (read_end, write_end):
            if fd >= 0:
                os.close(fd)
    assert not liveness.watch_supervisor(gone.set, {})


@pytest.mark.parametrize(
    ("heard", "now", "ready", "alive"),
    [
        ([None, None], 10.0, False, False),
        ([9.0, None], 10.0, False, False),
        ([9.6, 9.9], 10.0, True, True),
        ([9.5, 9.9], 10.0, True, True),  # exactly the window ago
        ([9.4, 9.9], 10.0, True, False),  # one worker silent for longer than the window
    ],
)
def test_supervisor_liveness(heard: list[float | None], now: float, ready: bool,
                             alive: bool) -> None:
    """The supervisor counts its workers ready once each has beaten, and alive only while
    each beat within the window (half the watchdog)."""
    live = liveness.Liveness(len(heard), window=0.5)
    for worker, at in enumerate(heard):
        if at is not None:
            live.heard(worker, at)
    assert live.all_ready is ready
    assert live.alive(now) is alive
