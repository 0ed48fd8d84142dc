"""Socket activation: ``serve`` on a socket passed by systemd (LISTEN_FDS), restarted while
clients keep connecting, one process or ``--workers 2``; and the parsing of what systemd
passes."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestServer

from sidecar.errors import ConfigError
from sidecar.service import activation
from sidecar.simulator import SimulatorConfig, make_simulator_app
from tests.service.socket_unit import SocketUnit, children


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def sim_url() -> AsyncIterator[str]:
    """A simulated vLLM node at 100 tokens per second, in this process."""
    server = TestServer(make_simulator_app(SimulatorConfig(tokens_per_second=100)),
                        host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("")).rstrip("/")
    await server.close()


def serve_argv(upstream: str, workers: int) -> list[str]:
    return ["serve", "--upstream", upstream, "--metrics-listen", f"127.0.0.1:{free_port()}",
            "--workers", str(workers), "--drain-timeout-seconds", "20", "--log-level",
            "warning"]


@dataclass
class Outcome:
    started: float
    ended: float
    ok: bool
    detail: str


SHORT = {"model": "sim-healthy", "max_tokens": 4, "stream": True,
         "messages": [{"role": "user", "content": "hi"}]}


async def client(url: str, until: asyncio.Event, results: list[Outcome], n: int) -> None:
    """Send requests one after another, each on a new connection, until ``until`` is set:
    a short watched stream, then a pass-through ``GET /v1/models``, in turn."""
    connector = aiohttp.TCPConnector(force_close=True)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        i = n
        while not until.is_set():
            started = time.monotonic()
            try:
                if i % 2:
                    async with session.get(url + "/v1/models") as resp:
                        body = await resp.read()
                        ok = resp.status == 200 and b'"object":"list"' in body
                else:
                    async with session.post(url + "/v1/chat/completions", json=SHORT) as resp:
                        body = await resp.read()
                        ok = resp.status == 200 and body.endswith(b"data: [DONE]\n\n")
                detail = f"{resp.status} {body[-120:]!r}"
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                ok, detail = False, repr(exc)
            results.append(Outcome(started, time.monotonic(), ok, detail))
            i += 1


async def long_stream(url: str, first_bytes: asyncio.Event) -> bytes:
    """A 60-token stream (0.6 s at 100 tokens/s), read to its end."""
    body = {"model": "sim-healthy", "max_tokens": 60, "stream": True,
            "messages": [{"role": "user", "content": "tell me"}]}
    parts = []
    async with aiohttp.ClientSession() as session, session.post(
            url + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 200
        async for chunk in resp.content.iter_any():
            parts.append(chunk)
            first_bytes.set()
    return b"".join(parts)


# With two workers it takes twice as long (three processes start, twice): ``slow``.
@pytest.mark.parametrize("workers", [1, pytest.param(2, marks=pytest.mark.slow)])
async def test_restart_under_socket_activation(tmp_path: Path, sim_url: str,
                                               workers: int) -> None:
    """A restart of a socket-activated sidecar while clients keep opening connections: no
    connection is refused and every request succeeds, the one made while no sidecar
    process ran included (it waits in the kernel's queue of the socket the unit holds,
    and the new process answers it); the stream in flight at SIGTERM finishes in full (the
    drain), and the old process exits 0. Each process, once ready, pings the watchdog."""
    unit = SocketUnit(tmp_path, watchdog_usec=2_000_000)
    try:
        old = unit.start(*serve_argv(sim_url, workers))
        await unit.ready(old)
        first_bytes = asyncio.Event()
        in_flight = asyncio.create_task(long_stream(unit.url, first_bytes))
        await asyncio.wait_for(first_bytes.wait(), 10)
        stop = asyncio.Event()
        results: list[Outcome] = []
        clients = [asyncio.create_task(client(unit.url, stop, results, n)) for n in range(6)]
        await unit.wait_for(lambda: len(results) >= 6, what="requests before the restart")
        stopping_at = time.monotonic()
        assert await unit.stop(old) == 0
        # No sidecar process runs now: the connection is accepted by the kernel.
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", unit.port), 5)
        writer.write(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        new = unit.start(*serve_argv(sim_url, workers))
        await unit.ready(new)
        ready_at = time.monotonic()
        gap_answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        await unit.wait_for(lambda: sum(r.started > ready_at for r in results) >= 12,
                            what="requests after the restart")
        stop.set()
        await asyncio.gather(*clients)
        streamed = await in_flight
    finally:
        unit.close()
    failed = [r.detail for r in results if not r.ok]
    assert failed == [], failed
    assert gap_answer.startswith(b"HTTP/1.1 200 OK\r\n"), gap_answer[:200]
    assert b'"object":"list"' in gap_answer
    # Clients kept connecting during the drain too, and the new process answered them.
    assert any(stopping_at < r.started and r.ended > ready_at for r in results)
    assert streamed.endswith(b"data: [DONE]\n\n")
    chunks = [orjson.loads(e[6:]) for e in streamed.split(b"\n\n") if e.startswith(b"data: {")]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert unit.said(old.pid, "STOPPING=1")
    assert unit.said(old.pid, "WATCHDOG=1")
    assert unit.said(new.pid, "WATCHDOG=1")


async def test_workers_share_the_passed_socket_and_the_watchdog(tmp_path: Path,
                                                                sim_url: str) -> None:
    """``--workers 2`` under socket activation and a 0.4 s watchdog: both workers accept on
    the one passed socket (none binds its own; with either one stopped the other answers
    every request). Only the supervisor talks to systemd, and it sends ``WATCHDOG=1`` only
    while every worker's event loop beats: a stopped worker stops the pings, and they
    resume when it runs again. Workers whose supervisor is killed exit on their own."""
    unit = SocketUnit(tmp_path, watchdog_usec=400_000)
    try:
        proc = unit.start(*serve_argv(sim_url, 2))
        await unit.ready(proc)
        workers = children(proc.pid)
        assert len(workers) == 2
        inode = os.stat(unit.sock.fileno()).st_ino
        for pid in workers:
            sockets = [os.stat(f"/proc/{pid}/fd/{fd}").st_ino
                       for fd in os.listdir(f"/proc/{pid}/fd")
                       if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")]
            assert inode in sockets
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True),
                                         timeout=aiohttp.ClientTimeout(total=10)) as session:
            for stopped in workers:
                await unit.wait_for(
                    lambda: len(unit.said(proc.pid, "WATCHDOG=1", time.monotonic() - 0.5)) >= 2,
                    what="watchdog pings while every worker runs")
                os.kill(stopped, signal.SIGSTOP)
                try:
                    stopped_at = time.monotonic()
                    for _ in range(4):
                        async with session.get(unit.url + "/v1/models") as resp:
                            assert resp.status == 200
                    # The pings stop: none for 0.6 s (three ping intervals).
                    await unit.wait_for(
                        lambda: not unit.said(proc.pid, "WATCHDOG=1", time.monotonic() - 0.6),
                        timeout=5, what="the pings to stop")
                    # The last one came soon after the stop: the worker's last beat
                    # counts for half the watchdog (0.2 s).
                    assert not unit.said(proc.pid, "WATCHDOG=1", stopped_at + 1.0)
                finally:
                    os.kill(stopped, signal.SIGCONT)
                resumed_at = time.monotonic()
                await unit.wait_for(
                    lambda since=resumed_at: unit.said(proc.pid, "WATCHDOG=1", since),
                    what="the pings to resume")
        assert {n.pid for n in unit.notices} == {proc.pid}
        os.kill(proc.pid, signal.SIGKILL)  # not SIGTERM: nothing forwards it to the workers
        await unit.wait_for(lambda: not any(running(pid) for pid in workers), timeout=10,
                            what="the workers of a killed supervisor to exit")
    finally:
        unit.close()


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie has)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


# -- what systemd passes ----------------------------------------------------------------------


def test_passed_fds_follow_sd_listen_fds() -> None:
    """LISTEN_FDS counts descriptors from 3, LISTEN_FDNAMES names them (unnamed when the
    count differs), and LISTEN_PID must name this process; a supervisor's hand-off to its
    workers names descriptors directly."""
    env = {"LISTEN_PID": "42", "LISTEN_FDS": "2", "LISTEN_FDNAMES": "web:metrics"}
    assert activation.passed_fds(env, 42) == {3: "web", 4: "metrics"}
    assert activation.passed_fds(env, 43) == {}
    assert activation.passed_fds({**env, "LISTEN_FDNAMES": "web"}, 42) == {3: "", 4: ""}
    assert activation.passed_fds({}, 42) == {}
    handed = {activation.WORKER_FDS_ENV: "listen=3,metrics=7"}
    assert activation.passed_fds(handed, 1) == {3: "listen", 7: "metrics"}
    with pytest.raises(ConfigError, match="LISTEN_FDS"):
        activation.passed_fds({"LISTEN_PID": "42", "LISTEN_FDS": "x"}, 42)


def _listener() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_inherit_takes_the_sockets_by_role_and_clears_the_environment() -> None:
    """The socket named ``metrics`` serves the metrics listener, the other one clients; the
    variables that passed them are removed, so no child process takes them too; the
    hand-off to workers names the same descriptors."""
    client, metrics = _listener(), _listener()
    cfd, mfd = os.dup(client.fileno()), os.dup(metrics.fileno())
    env = {activation.WORKER_FDS_ENV: f"metrics={mfd},x={cfd}", "LISTEN_PID": "1",
           "OTHER": "kept"}
    got = activation.inherit(env, pid=1)
    try:
        assert got.listen is not None
        assert got.metrics is not None
        assert got.listen.fileno() == cfd
        assert got.metrics.getsockname() == metrics.getsockname()
        assert env == {"OTHER": "kept"}
        assert activation.worker_env(got) == {
            activation.WORKER_FDS_ENV: ",".join(
                f"{name}={fd}" for fd, name in sorted({cfd: "listen", mfd: "metrics"}.items()))}
        assert not got.listen.get_inheritable()
    finally:
        for sock in (client, metrics, got.listen, got.metrics):
            if sock is not None:
                sock.close()
    assert activation.worker_env(activation.Inherited()) == {}


def test_inherit_refuses_what_it_cannot_serve() -> None:
    """A descriptor that is not a listening stream socket, or two sockets for clients, is a
    config error naming LISTEN_FDS (exit code 2), not a crash."""
    read_end, write_end = os.pipe()
    unbound = socket.socket()
    first, second = _listener(), _listener()
    try:
        cases = [f"listen={read_end}", f"listen={unbound.fileno()}",
                 f"a={first.fileno()},b={second.fileno()}"]
        for handed in cases:
            with pytest.raises(ConfigError, match="LISTEN_FDS"):
                activation.inherit({activation.WORKER_FDS_ENV: handed}, pid=1)
    finally:
        os.close(read_end)
        os.close(write_end)
        for sock in (unbound, first, second):
            sock.close()
