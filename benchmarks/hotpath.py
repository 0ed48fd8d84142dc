"""Hot-path microbenchmark: CPU per SSE event of the sidecar's pure pipeline vs the floor.

Run from the repository root: ``.venv/bin/python -m benchmarks.hotpath [--reps 5]
[--api chat|messages|responses]``

The input is what the load benchmark streams: ``sim-healthy`` streams of the API
(``--api``, default chat) taken from the simulator (in-process, unpaced), split into one
chunk per SSE event, as a paced upstream delivers them. Timed per event, best of
``reps`` (medians hide nothing here: the work is deterministic; the best run is the one
least disturbed by other processes):

- ``floor``: what the bare parsing proxy does (split SSE, ``orjson.loads``, read the
  delta text);
- ``watch-nodetect``: ``Attempt.feed`` of a first attempt with a chain whose detectors
  are all out of reach and cheap (budgets only): SSE decoding + stream model + state;
- ``watch-shadow`` / ``watch-enforce``: ``Attempt.feed`` with the default detector chain.

This isolates the pure per-event work from socket I/O, which the load benchmark
(``benchmarks.run paced``) measures end to end.

``--interleave N`` feeds N streams at once, one event of each in turn (the streams above,
reused, cut to the shortest), as a loaded proxy does: each stream's state has gone cold in
the CPU caches by its next event. With N in the thousands the state no longer fits the
caches, which shows what the per-stream objects cost beyond their instructions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import replace

import aiohttp
from aiohttp.test_utils import TestServer

from benchmarks.floor import READERS, parse_events
from benchmarks.loadgen import APIS, PATHS, Api, request_body
from detectors import DetectorConfig
from sidecar.apis import REGISTRY
from sidecar.core.attempt import Attempt, AttemptSpec
from sidecar.core.wire import WireApi
from sidecar.dialects import DIALECTS
from sidecar.simulator import SimulatorConfig, make_simulator_app


async def _streams(count: int, max_tokens: int, api: Api = "chat") -> list[list[bytes]]:
    server = TestServer(make_simulator_app(SimulatorConfig(tokens_per_second=0)),
                        host="127.0.0.1")
    await server.start_server()
    out: list[list[bytes]] = []
    try:
        async with aiohttp.ClientSession() as session:
            for i in range(count):
                body = request_body(api, "sim-healthy", max_tokens, f"hot {i}")
                async with session.post(server.make_url(PATHS[api]), json=body) as resp:
                    raw = await resp.read()
                events = [e + b"\n\n" for e in raw.split(b"\n\n") if e]
                out.append(events)
    finally:
        await server.close()
    return out


#: The API being measured (``--api``), its wire API and the floor's reader of its events.
_API: list[tuple[Api, WireApi, Callable[[object], int]]] = []


def _use(api: Api) -> None:
    wire = next(w for w in REGISTRY if w.path == PATHS[api])
    _API[:] = [(api, wire, READERS[PATHS[api]])]


def _floor(stream: list[bytes]) -> int:
    chars = 0
    buf = b""
    read = _API[0][2]
    for chunk in stream:
        _done, buf, n = parse_events(buf, chunk, read)
        chars += n
    return chars


def _first_attempt(detectors: DetectorConfig, stop: bool) -> Attempt:
    """A first attempt as the proxy makes it with the default ladder (``["no-think"]``):
    no salvage step, so no reasoning is kept for one."""
    api, wire, _ = _API[0]
    facts = replace(wire.facts(request_body(api, "m", 1, "")), usage=False)
    opened = wire.open(facts, DIALECTS["vllm"], request_id="bench", model="m")
    spec = AttemptSpec(number=0, detectors=detectors, started_at=0.0, exchange_started=0.0,
                       stop_on_verdict=stop, keep_reasoning=False)
    return opened.attempt(spec)


def _end(attempt: Attempt, now: float) -> int:
    """End ``attempt``'s stream; the bytes it sends then. Raises if a detector fired: the
    input is healthy text."""
    sent = len(attempt.eof(now))
    if attempt.verdict is not None:
        raise RuntimeError(f"a detector fired on healthy text: {attempt.verdict}")
    return sent


def _watch(stream: list[bytes], detectors: DetectorConfig, stop: bool) -> int:
    attempt = _first_attempt(detectors, stop)
    sent = 0
    now = 0.0
    for chunk in stream:
        now += 0.02
        sent += len(attempt.feed(chunk, now))
    return sent + _end(attempt, now)


def _floor_many(streams: list[list[bytes]]) -> int:
    """``_floor`` of every stream at once, one event of each in turn."""
    chars = 0
    bufs = [b""] * len(streams)
    read = _API[0][2]
    for row in zip(*streams, strict=True):
        for i, chunk in enumerate(row):
            _done, bufs[i], n = parse_events(bufs[i], chunk, read)
            chars += n
    return chars


def _watch_many(streams: list[list[bytes]], detectors: DetectorConfig, stop: bool) -> int:
    """``_watch`` of every stream at once, one event of each in turn."""
    attempts = [_first_attempt(detectors, stop) for _ in streams]
    sent = 0
    now = 0.0
    for row in zip(*streams, strict=True):
        now += 0.02
        for attempt, chunk in zip(attempts, row, strict=True):
            sent += len(attempt.feed(chunk, now))
    return sent + sum(_end(attempt, now) for attempt in attempts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=12,
                        help="sim-healthy streams fetched from the simulator (default 12)")
    parser.add_argument("--max-tokens", type=int, default=1500,
                        help="tokens per stream (default 1500)")
    parser.add_argument("--reps", type=int, default=5,
                        help="timed runs per case; the best is reported (default 5)")
    parser.add_argument("--interleave", type=int, default=0, metavar="N",
                        help="feed N streams at once, an event of each in turn (0: one "
                             "stream after the other)")
    parser.add_argument("--api", choices=APIS, default="chat",
                        help="the wire API of the streams (default chat)")
    args = parser.parse_args(argv)
    if args.interleave < 0 or args.streams < 1 or args.reps < 1 or args.max_tokens < 1:
        parser.error("--streams, --max-tokens and --reps must be at least 1, "
                     "--interleave at least 0")
    _use(args.api)
    streams = asyncio.run(_streams(args.streams, args.max_tokens, args.api))
    if args.interleave:
        shortest = min(len(s) for s in streams)
        streams = [streams[i % len(streams)][:shortest] for i in range(args.interleave)]
    events = sum(len(s) for s in streams)
    defaults = DetectorConfig()
    nodetect = replace(defaults, degeneration_enabled=False, periodic_enabled=False,
                       recurrence_enabled=False, stall_seconds=None)
    cases: dict[str, Callable[[list[list[bytes]]], object]]
    if args.interleave:
        cases = {
            "floor": _floor_many,
            "watch-nodetect": lambda ss: _watch_many(ss, nodetect, True),
            "watch-shadow": lambda ss: _watch_many(ss, defaults, False),
            "watch-enforce": lambda ss: _watch_many(ss, defaults, True),
        }
    else:
        cases = {
            "floor": lambda ss: [_floor(s) for s in ss],
            "watch-nodetect": lambda ss: [_watch(s, nodetect, True) for s in ss],
            "watch-shadow": lambda ss: [_watch(s, defaults, False) for s in ss],
            "watch-enforce": lambda ss: [_watch(s, defaults, True) for s in ss],
        }
    results: dict[str, float] = {}
    for name, fn in cases.items():
        best = float("inf")
        for _ in range(args.reps):
            t0 = time.process_time()
            fn(streams)
            best = min(best, time.process_time() - t0)
        results[name] = best / events * 1e6
    print(json.dumps({
        "api": args.api,
        "events": events,
        "interleave": args.interleave,
        "us_per_event": {k: round(v, 2) for k, v in results.items()},
        "ratio_to_floor": {k: round(v / results["floor"], 2) for k, v in results.items()},
    }, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
