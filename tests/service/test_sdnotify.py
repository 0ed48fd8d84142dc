"""Tests for sidecar.service.sdnotify against a real AF_UNIX datagram socket."""

from __future__ import annotations

import os
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sidecar.service import sdnotify


@pytest.fixture
def listener() -> Iterator[tuple[socket.socket, dict[str, str]]]:
    """A bound datagram socket in a short temp dir (AF_UNIX paths max out at 108 bytes)."""
    with tempfile.TemporaryDirectory(prefix="sdn") as tmp:
        path = os.path.join(tmp, "notify")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        sock.settimeout(5)
        try:
            yield sock, {"NOTIFY_SOCKET": path}
        finally:
            sock.close()


def test_ready_status_stopping_reach_the_socket(
    listener: tuple[socket.socket, dict[str, str]],
) -> None:
    """Each call sends exactly its state as one datagram."""
    sock, env = listener
    assert sdnotify.ready(environ=env)
    assert sock.recv(4096) == b"READY=1"
    assert sdnotify.ready("serving on\n127.0.0.1:8000", environ=env)
    assert sock.recv(4096) == b"READY=1\nSTATUS=serving on 127.0.0.1:8000"
    assert sdnotify.status("draining 3 streams", environ=env)
    assert sock.recv(4096) == b"STATUS=draining 3 streams"
    assert sdnotify.stopping(environ=env)
    assert sock.recv(4096) == b"STOPPING=1"
    assert sdnotify.watchdog(environ=env)
    assert sock.recv(4096) == b"WATCHDOG=1"


def test_reloading_carries_the_monotonic_clock(
    listener: tuple[socket.socket, dict[str, str]],
) -> None:
    """RELOADING=1 comes with MONOTONIC_USEC read from CLOCK_MONOTONIC at the call."""
    sock, env = listener
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert sdnotify.reloading(environ=env)
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    first, second = sock.recv(4096).decode().split("\n")
    assert first == "RELOADING=1"
    key, usec = second.split("=")
    assert key == "MONOTONIC_USEC"
    assert before <= int(usec) <= after


def test_abstract_socket_address() -> None:
    """An `@name` NOTIFY_SOCKET reaches the abstract-namespace socket `\\0name`."""
    name = f"runaway-sidecar-test-{os.getpid()}-{time.monotonic_ns()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        assert sdnotify.ready(environ={"NOTIFY_SOCKET": "@" + name})
        assert sock.recv(4096) == b"READY=1"


def test_process_environment_is_the_default(
    listener: tuple[socket.socket, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without an explicit environ, NOTIFY_SOCKET is read from os.environ."""
    sock, env = listener
    monkeypatch.setenv("NOTIFY_SOCKET", env["NOTIFY_SOCKET"])
    assert sdnotify.stopping()
    assert sock.recv(4096) == b"STOPPING=1"


def test_no_socket_is_a_noop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside systemd every call returns False and does nothing."""
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert not sdnotify.ready()
    assert not sdnotify.reloading(environ={})
    assert not sdnotify.notify("READY=1", environ={"NOTIFY_SOCKET": ""})


def test_failures_never_raise(tmp_path: Path) -> None:
    """A missing, relative, over-long or non-socket path returns False instead of raising."""
    regular = tmp_path / "file"
    regular.write_text("")
    for value in [
        str(tmp_path / "absent"),
        "relative/notify",
        "/" + "x" * 200,
        str(regular),
        "/bad\0path",
    ]:
        assert not sdnotify.notify("READY=1", environ={"NOTIFY_SOCKET": value}), value
    assert not sdnotify.notify("\udcff", environ={"NOTIFY_SOCKET": str(tmp_path / "s")})


def test_watchdog_interval() -> None:
    """WATCHDOG_USEC gives the timeout for this process only, and None otherwise."""
    mine = str(os.getpid())
    assert sdnotify.watchdog_interval({"WATCHDOG_USEC": "2500000"}) == 2.5
    assert sdnotify.watchdog_interval({"WATCHDOG_USEC": "2500000", "WATCHDOG_PID": mine}) == 2.5
    assert sdnotify.watchdog_interval({"WATCHDOG_USEC": "2500000", "WATCHDOG_PID": "1"}) is None
    assert sdnotify.watchdog_interval({"WATCHDOG_USEC": "0"}) is None
    assert sdnotify.watchdog_interval({"WATCHDOG_USEC": "soon"}) is None
    assert sdnotify.watchdog_interval({}) is None
