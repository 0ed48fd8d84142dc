"""A stand-in for systemd in tests: a socket unit that holds the listening socket across
restarts of the service, and the service manager's side of sd_notify.

:class:`SocketUnit` binds 127.0.0.1:0 and keeps the socket for its whole life, as a
``.socket`` unit does. :meth:`SocketUnit.start` runs ``serve`` on it the way systemd starts
a socket-activated service: the socket becomes descriptor 3 of the child, and the child's
environment names it (``LISTEN_PID`` = the child's own pid, ``LISTEN_FDS=1``,
``LISTEN_FDNAMES``). The pid is known only after the fork, so a two-line shim sets it
between fork and exec, as systemd does. ``NOTIFY_SOCKET`` points at a datagram socket whose
messages are collected with the sender's pid (``SO_PASSCRED``), which is how systemd tells
the main process from others (``NotifyAccess=main``).

Only Python is needed (``systemd-socket-activate`` runs the service in its own place and
cannot restart it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# Between fork and exec: the passed socket moves to descriptor 3 and LISTEN_PID names the
# process that will run ``serve`` (exec keeps the pid).
_SHIM = """\
import os, sys
fd = int(sys.argv[1])
if fd != 3:
    os.dup2(fd, 3)
    os.close(fd)
os.environ["LISTEN_PID"] = str(os.getpid())
os.environ["WATCHDOG_PID"] = str(os.getpid())
os.execv(sys.executable, [sys.executable, "-m", "sidecar", *sys.argv[2:]])
"""


@dataclass(frozen=True)
class Notice:
    """One sd_notify datagram: when it arrived, from which process, what it said."""

    at: float
    pid: int
    text: str


class SocketUnit:
    """A listening socket held across restarts, the services started on it, and their
    sd_notify messages. ``watchdog_usec`` sets ``WATCHDOG_USEC`` as ``WatchdogSec=`` does."""

    def __init__(self, tmp: Path, watchdog_usec: int | None = None) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4096)
        self.port: int = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._tmp = tmp
        self._watchdog = watchdog_usec
        # AF_UNIX paths are limited to 108 bytes: an abstract name instead of a tmp path.
        self._notify_name = f"runaway-sidecar-test-{os.getpid()}-{time.monotonic_ns()}"
        self._notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._notify.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self._notify.bind("\0" + self._notify_name)
        self._notify.settimeout(0.1)
        self.notices: list[Notice] = []
        self._closing = False
        self._reader = threading.Thread(target=self._read_notices, daemon=True)
        self._reader.start()
        self.procs: list[subprocess.Popen[bytes]] = []

    def _read_notices(self) -> None:
        creds = socket.CMSG_SPACE(struct.calcsize("3i"))
        while not self._closing:
            try:
                data, ancdata, _flags, _addr = self._notify.recvmsg(4096, creds)
            except TimeoutError:
                continue
            except OSError:
                return
            pid = -1
            for level, kind, value in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid = struct.unpack("3i", value[:12])[0]
            self.notices.append(Notice(time.monotonic(), pid, data.decode()))

    def start(self, *argv: str) -> subprocess.Popen[bytes]:
        """Start ``runaway-sidecar ARGV`` on the socket, as systemd starts the service."""
        env = dict(os.environ, LISTEN_FDS="1", LISTEN_FDNAMES="runaway-sidecar@test.socket",
                   NOTIFY_SOCKET="@" + self._notify_name)
        if self._watchdog is not None:
            env["WATCHDOG_USEC"] = str(self._watchdog)
        log = (self._tmp / f"serve-{len(self.procs)}.log").open("wb")
        fd = self.sock.fileno()
        # A session of its own, like the unit's cgroup: ``close`` ends every process in it.
        proc = subprocess.Popen([sys.executable, "-c", _SHIM, str(fd), *argv],
                                pass_fds=(fd,), env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        log.close()
        self.procs.append(proc)
        return proc

    def said(self, pid: int, text: str, since: float = 0.0) -> list[Notice]:
        """The notices from ``pid`` holding the line ``text``, arrived at ``since`` or later."""
        return [n for n in self.notices
                if n.pid == pid and text in n.text.split("\n") and n.at >= since]

    async def wait_for(self, condition: Callable[[], object], timeout: float = 30.0,
                       what: str = "condition") -> None:
        """Wait (without blocking the event loop) until ``condition()`` is true."""
        deadline = time.monotonic() + timeout
        while not condition():
            for proc in self.procs:
                assert proc.returncode in (None, 0, -signal.SIGKILL), self.logs()
            assert time.monotonic() < deadline, f"timed out waiting for {what}\n{self.logs()}"
            await asyncio.sleep(0.01)

    async def ready(self, proc: subprocess.Popen[bytes]) -> None:
        """Wait for ``READY=1`` from ``proc``."""
        await self.wait_for(lambda: proc.poll() is not None or self.said(proc.pid, "READY=1"),
                            what=f"READY=1 from {proc.pid}")
        assert proc.poll() is None, self.logs()

    async def stop(self, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> int:
        """SIGTERM ``proc`` (``systemctl stop``) and wait for it to exit; its exit code."""
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while proc.poll() is None:
            assert time.monotonic() < deadline, "did not exit after SIGTERM"
            await asyncio.sleep(0.01)
        return proc.returncode

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:]
                         for p in sorted(self._tmp.glob("serve-*.log")))

    def close(self) -> None:
        """Kill every process the services started that still runs (the whole session,
        workers included, as systemd kills a unit's cgroup), and close the sockets."""
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        self._closing = True
        self._reader.join(timeout=5)
        self._notify.close()
        self.sock.close()


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (Linux ``/proc``)."""
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(p) for p in text.split()]
