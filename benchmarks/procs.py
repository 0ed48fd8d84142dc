"""Processes under test: start them on free loopback ports, read their CPU time and RSS.

CPU time comes from ``/proc/PID/stat`` (Linux): utime + stime of a process (all its
threads) summed over it and its live descendants, in clock ticks (10 ms; runs are long
enough that this is under 1 % of the figure). Descendants count because
``serve --workers N`` proxies in child processes. No psutil: ``/proc`` says all that is needed.

A sidecar says on stderr, as it starts, which build of the per-event path it runs (see
:func:`build_of`): a figure is never taken on the wrong build unannounced.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from detectors.native import PURE_ENV, choose, pure_requested

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
_TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (released at once; fine for a benchmark)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, ()))
    return out


def _times_of(pid: int) -> tuple[float, float]:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    return int(fields[11]) / _TICK, int(fields[12]) / _TICK  # utime, stime, all threads


def cpu_by_process(pid: int) -> dict[int, tuple[float, float]]:
    """User and system CPU seconds used so far by ``pid`` and by each of its live
    descendants, by process."""
    return {p: _times_of(p) for p in descendants(pid)}


def total_times(each: dict[int, tuple[float, float]]) -> tuple[float, float]:
    """User and system CPU seconds of all the processes of a ``cpu_by_process`` reading."""
    return sum(u for u, _ in each.values()), sum(s for _, s in each.values())


def cpu_times(pid: int) -> tuple[float, float]:
    """User and system CPU seconds used so far by ``pid`` and its live descendants."""
    return total_times(cpu_by_process(pid))


def cpu_seconds(pid: int) -> float:
    """CPU seconds used so far by ``pid`` and its live descendants."""
    return sum(cpu_times(pid))


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` and its live descendants."""
    total = 0
    for p in descendants(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
    return total


@dataclass
class Proc:
    """One started server process."""

    name: str
    cmd: list[str]
    port: int
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path = ROOT  # ``python -m`` imports from here first
    popen: subprocess.Popen[bytes] | None = None
    #: Runs the sidecar package of ``cwd``: :meth:`start` announces its build.
    sidecar: bool = False
    #: The build a sidecar runs, as :func:`build_of` found it at :meth:`start`.
    build: str = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def start(self, log_dir: Path, timeout: float = 60.0) -> None:
        if self.sidecar:
            self.build, warning = build_of(self)
            print(f"build: {self.name} runs {self.build}", file=sys.stderr, flush=True)
            if warning:
                print(f"WARNING: {warning}", file=sys.stderr, flush=True)
        # The child writes the log through its own copy of the descriptor.
        with (log_dir / f"{self.name}.log").open("wb") as log:
            self.popen = subprocess.Popen(self.cmd, cwd=self.cwd, stdout=log,
                                          stderr=subprocess.STDOUT, env={**os.environ, **self.env})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.popen.returncode}; "
                                   f"see {log_dir / (self.name + '.log')}")
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=0.5):
                return
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not listen on {self.port} within {timeout}s")

    def stop(self) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(10)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(5)


def build_of(proc: Proc) -> tuple[str, str | None]:
    """Which build the sidecar ``proc`` will run, by the rule ``detectors.native`` applies
    at import, here applied to ``proc``'s checkout and environment: ``compiled (mypyc)``
    or ``pure Python (why)``. Second, a warning if ``proc`` is meant to run the compiled
    build (its own ``env`` does not set ``RUNAWAY_SIDECAR_PURE``, as ``enforce-pure``'s
    does) but would run the source although a compiled build sits beside it: compiled
    modules older than their source, or the variable set in this process's environment.
    (A ``--baseline`` checkout is judged by this checkout's rule.)"""
    env = {**os.environ, **proc.env}
    choice = choose(proc.cwd, env)
    build = f"pure Python ({choice.reason})" if choice.reason else "compiled (mypyc)"
    if not (choice.built and choice.reason) or pure_requested(proc.env):
        return build, None
    why = []
    if choice.stale:
        shown = ", ".join(choice.stale[:3]) + (", ..." if len(choice.stale) > 3 else "")
        many = len(choice.stale) > 1
        why.append(f"{len(choice.stale)} compiled module{'s are' if many else ' is'} older "
                   f"than {'their' if many else 'its'} source ({shown}); pip install -e "
                   f"{proc.cwd} builds {'them' if many else 'it'} anew")
    if pure_requested(env):
        why.append(f"{PURE_ENV} is set in this environment")
    return build, (f"{proc.name} is meant to run the compiled build but would run pure "
                   f"Python: {'; '.join(why)}")


def simulator(name: str, rate: float, extra: tuple[str, ...] = ()) -> Proc:
    """``simulate`` at ``rate`` tokens per second, with ``extra`` command-line options."""
    port = free_port()
    return Proc(name, [PYTHON, "-m", "sidecar", "simulate", "--listen", f"127.0.0.1:{port}",
                       "--tokens-per-second", str(rate), *extra], port)


def floor(kind: str, upstream: str, name: str | None = None,
          extra: tuple[str, ...] = ()) -> Proc:
    port = free_port()
    return Proc(name or kind, [PYTHON, "-m", "benchmarks.floor", "--kind", kind,
                               "--listen", f"127.0.0.1:{port}", "--upstream", upstream,
                               *extra], port)


def sidecar(name: str, upstream: str, mode: str, workers: int = 1,
            root: Path = ROOT, extra: tuple[str, ...] = ()) -> Proc:
    """``serve`` from the package in ``root`` (another checkout: a before/after run),
    with ``extra`` command-line options."""
    port = free_port()
    proc = Proc(name, [PYTHON, "-m", "sidecar", "serve", "--upstream", upstream,
                       "--listen", f"127.0.0.1:{port}",
                       "--metrics-listen", f"127.0.0.1:{free_port()}",
                       "--mode", mode, "--workers", str(workers), *extra], port)
    proc.cwd = root
    proc.sidecar = True
    return proc


@contextlib.contextmanager
def running(procs: list[Proc], log_dir: Path) -> Iterator[list[Proc]]:
    """Start ``procs`` in order, stop them in reverse on exit."""
    log_dir.mkdir(parents=True, exist_ok=True)
    started: list[Proc] = []
    try:
        for proc in procs:
            proc.start(log_dir)
            started.append(proc)
        yield procs
    finally:
        for proc in reversed(started):
            proc.stop()
