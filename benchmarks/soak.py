"""Soak: many concurrent streams through a sidecar subprocess against a simulator
subprocess, with runaways, client disconnects and upstream faults mixed in.

    .venv/bin/python benchmarks/soak.py --concurrency 1000 --duration 60
    .venv/bin/python benchmarks/soak.py --concurrency 1000 --duration 60 --workers 2

Reports unexpected errors (each scenario has a defined client-visible result), the
sidecar's RSS and open fds (all its processes: with ``--workers`` the supervisor and
its workers) idle before, after warm-up and at the end, its asyncio task count at
baseline and after the load (``runtime_stats`` log lines on SIGUSR1, summed over the
workers), established sidecar->simulator connections after the load, and the simulator's
running requests. The idle baseline is taken after one request has gone through and its
upstream connection has closed (within ``--drain``): what a process opens once, on first
use, for good (with ``--workers``, the Prometheus files of each kind of metric) is then
part of the baseline. Loopback only; bounded by ``--duration`` (plus a drain of at most
``--drain`` seconds) and ``--concurrency``. Exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import resource
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp

from benchmarks.procs import Proc, descendants, free_port, rss_bytes, running, simulator

ROOT = Path(__file__).resolve().parent.parent
FAULTS = ["reset-mid-stream", "http-500", "invalid-sse", "error-mid-stream",
          "reset-before-headers", "no-done"]


def sidecar_proc(upstream: str, workers: int) -> Proc:
    port = free_port()
    return Proc("sidecar", [sys.executable, "-m", "sidecar", "serve", "--upstream", upstream,
                            "--listen", f"127.0.0.1:{port}",
                            "--metrics-listen", f"127.0.0.1:{free_port()}",
                            "--mode", "enforce", "--log-level", "info",
                            "--workers", str(workers),
                            "--detectors.stall-seconds", "5"], port)


def open_fds(pid: int) -> int:
    """Open file descriptors of ``pid`` and the processes below it (the workers)."""
    total = 0
    for p in descendants(pid):
        try:
            total += len(os.listdir(f"/proc/{p}/fd"))
        except OSError:
            continue
    return total


def established_to(port: int) -> int:
    """Established TCP connections on this host whose remote end is ``port`` (loopback)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "01" and int(fields[2].rsplit(":", 1)[1], 16) == port:
                count += 1
    return count


def task_count(proc: Proc, log_dir: Path, processes: int) -> int:
    """Ask the sidecar for ``runtime_stats`` (the supervisor forwards the signal to its
    workers) and sum the task counts its ``processes`` serving processes log."""
    log = log_dir / "sidecar.log"
    before = log.read_text().count("runtime_stats")
    os.kill(proc.pid, signal.SIGUSR1)
    for _ in range(100):
        time.sleep(0.1)
        lines = [json.loads(ln) for ln in log.read_text().splitlines()
                 if "runtime_stats" in ln][before:]
        latest = {line["pid"]: int(line["asyncio_tasks"]) for line in lines}
        if len(latest) >= processes:
            return sum(latest.values())
    raise RuntimeError("no runtime_stats line from every sidecar process")


def prime(url: str) -> None:
    """One short stream through the sidecar, read to its end."""
    body = {"model": "sim-healthy", "stream": True, "max_tokens": 4,
            "messages": [{"role": "user", "content": "prime"}]}

    async def go() -> None:
        async with aiohttp.ClientSession() as s, s.post(url + "/v1/chat/completions",
                                                        json=body) as r:
            assert r.status == 200, r.status
            await r.read()

    asyncio.run(go())


def workers_of(pid: int) -> list[int]:
    return [p for p in descendants(pid) if p != pid]


def histogram_open(pid: int) -> bool:
    """Whether worker ``pid`` has opened its Prometheus histogram file (multiprocess mode
    opens one per kind of metric, on the first value of that kind)."""
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            if os.readlink(f"{fd_dir}/{fd}").endswith(f"histogram_{pid}.db"):
                return True
        except OSError:
            continue
    return False


def wait_idle(port: int, seconds: float) -> int:
    """Wait up to ``seconds`` for the sidecar's connections to ``port`` to close; the
    number still open."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and established_to(port):
        time.sleep(0.5)
    return established_to(port)


def scenario(rng: random.Random) -> tuple[str, dict[str, Any], dict[str, str]]:
    roll = rng.random()
    body: dict[str, Any] = {"model": "sim-healthy", "stream": True,
                            "max_tokens": rng.randint(20, 80),
                            "messages": [{"role": "user", "content": f"q{rng.random()}"}]}
    if roll < 0.55:
        return "healthy", body, {}
    if roll < 0.65:
        return "healthy_nonstream", {**body, "stream": False}, {}
    if roll < 0.77:
        return "runaway", {**body, "model": "sim-loop", "max_tokens": 2000,
                           "stream": rng.random() < 0.7}, {}
    if roll < 0.89:
        return "disconnect", {**body, "max_tokens": 400}, {}
    fault = rng.choice(FAULTS)
    return f"fault:{fault}", {**body, "stream": rng.random() < 0.7}, {
        "X-Sim-Fault": fault, "X-Sim-Fault-After": "3", "X-Sim-Fault-Delay": "0.5"}


def expected(kind: str, stream: bool, status: int, data: bytes) -> bool:
    """Whether a finished response is the defined result for its scenario."""
    if kind in ("healthy", "healthy_nonstream", "runaway"):
        if status != 200:
            return False
        return data.rstrip().endswith(b"[DONE]") if stream else data.startswith(b"{")
    fault = kind.removeprefix("fault:")
    if fault == "http-500":
        return status == 500
    if fault in ("invalid-sse", "reset-before-headers"):
        return status == 502
    # no-done with X-Sim-Fault-After cuts the stream there: a truncation, like a reset.
    if fault in ("reset-mid-stream", "error-mid-stream", "no-done"):
        if stream:
            return status == 200 and b'"error"' in data and data.endswith(b"data: [DONE]\n\n")
        return status in (500, 502) or (status == 200 and b'"error"' in data)
    return False


async def worker(session: aiohttp.ClientSession, url: str, stop_at: float, seed: int,
                 stats: collections.Counter[str], bad: list[str]) -> None:
    rng = random.Random(seed)
    while time.monotonic() < stop_at:
        kind, body, headers = scenario(rng)
        stream = body["stream"]
        try:
            async with asyncio.timeout(60), session.post(
                    url + "/v1/chat/completions", json=body, headers=headers) as resp:
                if kind == "disconnect":
                    for _ in range(rng.randint(1, 5)):
                        await resp.content.readany()
                    resp.close()  # drop the connection mid-stream
                    stats[kind] += 1
                    continue
                data = await resp.read()
            ok = expected(kind, stream, resp.status, data)
        except Exception as exc:
            ok, data = False, repr(exc).encode()
        stats[kind if ok else f"unexpected:{kind}"] += 1
        if not ok and len(bad) < 20:
            bad.append(f"{kind} stream={stream}: {data[-300:]!r}")


async def load(url: str, concurrency: int, duration: float, seed: int,
               on_warm: Any) -> tuple[collections.Counter[str], list[str]]:
    stats: collections.Counter[str] = collections.Counter()
    bad: list[str] = []
    stop_at = time.monotonic() + duration
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        workers = [asyncio.create_task(worker(session, url, stop_at, seed * 100_000 + i,
                                              stats, bad)) for i in range(concurrency)]
        await asyncio.sleep(min(15.0, duration / 4))
        await asyncio.to_thread(on_warm)
        await asyncio.gather(*workers)
    return stats, bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=1000)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    ap.add_argument("--rate", type=float, default=10.0, help="simulated tokens/s per stream")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=1, help="serve --workers N")
    ap.add_argument("--drain", type=float, default=25.0,
                    help="seconds to wait for connections to close after the load")
    ap.add_argument("--log-dir", type=Path, default=None,
                    help="where the processes' logs go (default: a new temporary directory)")
    args = ap.parse_args()
    args.log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="runaway-soak-"))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, args.concurrency * 4 + 1024))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))  # inherited by the children
    sim = simulator("simulator", args.rate)
    side = sidecar_proc(sim.url, args.workers)
    with running([sim, side], args.log_dir):
        time.sleep(1.0)
        prime(side.url)
        for _ in range(50):  # with --workers, until each has served one (new connections)
            if args.workers == 1 or all(histogram_open(p) for p in workers_of(side.pid)):
                break
            prime(side.url)
        if wait_idle(sim.port, args.drain):
            raise RuntimeError("the primed upstream connection never closed")
        base_tasks = task_count(side, args.log_dir, args.workers)
        fds_idle = open_fds(side.pid)
        marks: dict[str, float] = {}

        def warm() -> None:
            marks["rss0"], marks["fds0"] = rss_bytes(side.pid), open_fds(side.pid)

        started = time.monotonic()
        stats, bad = asyncio.run(load(side.url, args.concurrency, args.duration, args.seed,
                                      warm))
        load_s = time.monotonic() - started
        rss1, fds1 = rss_bytes(side.pid), open_fds(side.pid)
        upstream_right_after = established_to(sim.port)
        upstream_after = wait_idle(sim.port, args.drain)
        end_tasks = task_count(side, args.log_dir, args.workers)
        rss2, fds2 = rss_bytes(side.pid), open_fds(side.pid)

        async def sim_running() -> float:
            async with aiohttp.ClientSession() as s, s.get(sim.url + "/metrics") as r:
                text = await r.text()
            return sum(float(ln.split()[-1]) for ln in text.splitlines()
                       if ln.startswith("vllm:num_requests_running"))

        running_after = asyncio.run(sim_running())
    total = sum(stats.values())
    growth = (rss1 - marks["rss0"]) / marks["rss0"]
    print(f"load: {args.concurrency} concurrent streams for {load_s:.1f} s, {total} requests "
          f"({total / load_s:.0f}/s), sidecar workers: {args.workers}")
    print(f"by scenario: {dict(sorted(stats.items()))}")
    unexpected = sum(v for k, v in stats.items() if k.startswith("unexpected"))
    print(f"unexpected: {unexpected}")
    for line in bad:
        print(f"  {line}")
    print(f"sidecar RSS: {marks['rss0'] / 2**20:.1f} MiB after warm-up, "
          f"{rss1 / 2**20:.1f} MiB at end of load ({growth:+.1%}), "
          f"{rss2 / 2**20:.1f} MiB idle after")
    print(f"sidecar open fds: {fds_idle} idle before, {marks['fds0']:.0f} after warm-up, "
          f"{fds1} at end of load, {fds2} idle after")
    print(f"logs: {args.log_dir}")
    print(f"asyncio tasks: {base_tasks} at baseline, {end_tasks} after the load")
    print(f"sidecar->simulator connections: {upstream_right_after} right after the load, "
          f"{upstream_after} after <= {args.drain:.0f} s; simulator requests running: "
          f"{running_after:.0f}")
    ok = (unexpected == 0 and growth < 0.10 and end_tasks <= base_tasks
          and upstream_after == 0 and running_after == 0 and fds2 <= fds_idle)
    print("targets met" if ok else "TARGETS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
