"""Load generator: C concurrent streaming requests against one base URL.

Run from the repository root, e.g. against a sidecar on :8000 in front of a simulator
paced at 50 tok/s::

    .venv/bin/python -m benchmarks.loadgen --url http://127.0.0.1:8000 \\
        --concurrency 256 --duration 10 --rate 50

Each of the C workers sends ``POST /v1/chat/completions`` (``stream: true``,
``max_tokens``; ``--api messages``: Anthropic's ``POST /v1/messages``, ``--api
responses``: OpenAI's ``POST /v1/responses`` with ``max_output_tokens``) and reads the
stream to its end, then starts the next one, until
``duration`` seconds have passed; streams still open then are read to their end (bounded
by ``max_tokens`` and a hard deadline). Worker starts are spread over the first pacing
interval's worth of a ramp so the streams do not tick in lockstep.

Reported (``LoadResult``):

- ``chunks_per_s``: SSE events received inside the steady window (after the ramp, before
  ``duration``), per second; ``offered_per_s`` is C x rate for paced runs;
- ``gap_p50_ms`` / ``gap_p99_ms``: time between consecutive events of one stream (events
  that arrive in one read have a gap of 0: they were coalesced upstream or in a proxy);
- ``late_p99_ms``: how far behind its own schedule (first event + k / rate) a stream's
  k-th event arrived, worst 1 % of events; only for paced runs;
- ``ttfb_p50_ms`` / ``ttfb_p99_ms``: request sent to first body byte;
- ``errors``: non-200 answers, exceptions, streams that ended without their end event
  (``[DONE]``, ``message_stop``, ``response.completed`` or ``response.incomplete``);
- ``events_per_read``: events per client read that carried one; 1.0 means every
  event travelled on its own (a paced load that is held), more means coalescing
  somewhere (the machine or a proxy fell behind, and per-chunk CPU looks cheaper);
- ``spliced``: streams in which the sidecar wrote its ``: runaway detector=...`` comment
  (a detector fired; on healthy text a false positive, should be 0).

The event count is the number of blank-line boundaries (``\\n\\n``), which is exact for
vLLM's LF-only framing, including boundaries split across reads. On every API one token
is one event (Messages and Responses events carry an ``event:`` line as well).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

import aiohttp

Api = Literal["chat", "messages", "responses"]
"""The wire APIs the load can drive."""
APIS: tuple[Api, ...] = get_args(Api)
PATHS: dict[Api, str] = {"chat": "/v1/chat/completions", "messages": "/v1/messages",
                         "responses": "/v1/responses"}
#: What the last event of a complete stream starts with, per API.
ENDS: dict[Api, tuple[bytes, ...]] = {
    "chat": (b"data: [DONE]",), "messages": (b"event: message_stop",),
    "responses": (b"event: response.completed", b"event: response.incomplete")}
#: The start of the SSE comment the sidecar writes where it cut a stream (every API).
SPLICE = b": runaway detector="


def request_body(api: Api, model: str, max_tokens: int, prompt: str) -> dict[str, Any]:
    """A streaming request of ``api`` (what the load's workers send)."""
    if api == "responses":
        return {"model": model, "stream": True, "max_output_tokens": max_tokens,
                "input": prompt}
    return {"model": model, "stream": True, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": prompt}]}


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """What to run: ``rate`` is the upstream's per-stream token rate (0: unpaced)."""

    url: str
    concurrency: int
    duration: float
    rate: float = 50.0
    max_tokens: int = 300
    model: str = "sim-healthy"
    max_streams: int = 100_000
    ramp: float | None = None  # seconds over which worker starts are spread
    grace: float = 30.0  # hard deadline after ``duration`` for streams still open
    api_key: str | None = None  # sent as a bearer token (LiteLLM requires one)
    api: Api = "chat"  # the wire API each stream takes


@dataclass(frozen=True, slots=True)
class LoadResult:
    """Figures of one run (see the module docstring)."""

    concurrency: int
    rate: float
    streams: int
    chunks: int
    window_s: float
    chunks_per_s: float
    offered_per_s: float
    gap_p50_ms: float
    gap_p99_ms: float
    late_p99_ms: float
    ttfb_p50_ms: float
    ttfb_p99_ms: float
    errors: int
    spliced: int
    wall_s: float
    events_per_read: float
    error_samples: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Acc:
    gaps: list[float] = field(default_factory=list)
    late: list[float] = field(default_factory=list)
    ttfb: list[float] = field(default_factory=list)
    window_chunks: int = 0
    chunks: int = 0
    reads: int = 0
    streams: int = 0
    errors: int = 0
    spliced: int = 0
    error_samples: list[str] = field(default_factory=list)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[rank]


async def _one_stream(session: aiohttp.ClientSession, spec: LoadSpec, body: bytes,
                      acc: _Acc, window: tuple[float, float]) -> None:
    clock = time.perf_counter
    interval = 1.0 / spec.rate if spec.rate > 0 else 0.0
    sent = clock()
    headers = {"Content-Type": "application/json"}
    if spec.api_key:
        headers["Authorization"] = f"Bearer {spec.api_key}"
    ends = ENDS[spec.api]
    async with session.post(spec.url + PATHS[spec.api], data=body,
                            headers=headers) as resp:
        if resp.status != 200:
            text = (await resp.read())[:200]
            raise RuntimeError(f"HTTP {resp.status}: {text!r}")
        first: float | None = None
        last = 0.0
        index = 0
        prev_tail = b""
        saw_done = saw_splice = False
        min_offset = math.inf
        offsets: list[float] = []
        while True:
            data = await resp.content.readany()
            if not data:
                break
            now = clock()
            if first is None:
                first = last = now
                acc.ttfb.append(now - sent)
            n = (prev_tail[-1:] + data).count(b"\n\n")
            # Enough of the previous read that a marker split across two reads is found.
            joined = prev_tail + data
            prev_tail = data[-32:]
            if not saw_done and any(end in joined for end in ends):
                saw_done = True
            if not saw_splice and SPLICE in joined:
                saw_splice = True
            if n == 0:
                continue
            acc.chunks += n
            acc.reads += 1
            if window[0] <= now < window[1]:
                acc.window_chunks += n
            if index:
                acc.gaps.append(now - last)
                acc.gaps.extend([0.0] * (n - 1))
            else:
                acc.gaps.extend([0.0] * (n - 1))
            if interval:
                for k in range(index, index + n):
                    off = now - k * interval
                    offsets.append(off)
                    min_offset = min(min_offset, off)
            index += n
            last = now
        if not saw_done:
            raise RuntimeError(f"stream ended without {ends[0].decode()}")
        acc.late.extend(off - min_offset for off in offsets)
        acc.spliced += saw_splice
        acc.streams += 1


async def run_load(spec: LoadSpec, ramped: asyncio.Event | None = None) -> LoadResult:
    """Run one bounded load and return its figures. ``ramped``, when given, is set once
    every worker has started its first stream (the ramp is over)."""
    loop = asyncio.get_running_loop()
    acc = _Acc()
    interval = 1.0 / spec.rate if spec.rate > 0 else 0.0
    ramp = spec.ramp if spec.ramp is not None else min(1.0, spec.duration / 4)
    start = time.perf_counter()
    window = (start + ramp + interval * 2, start + spec.duration)
    stop_at = loop.time() + spec.duration
    budget = [spec.max_streams]
    waiting = [spec.concurrency]  # workers whose first stream has not started yet

    async def worker(wid: int) -> None:
        await asyncio.sleep(ramp * wid / max(1, spec.concurrency))
        waiting[0] -= 1
        if ramped is not None and not waiting[0]:
            ramped.set()
        i = 0
        while loop.time() < stop_at and budget[0] > 0:
            budget[0] -= 1
            body = json.dumps(request_body(spec.api, spec.model, spec.max_tokens,
                                           f"load {wid} {i}")).encode()
            i += 1
            try:
                await _one_stream(session, spec, body, acc, window)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                acc.errors += 1
                if len(acc.error_samples) < 5:
                    acc.error_samples.append(f"{type(exc).__name__}: {exc}")

    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks = [asyncio.create_task(worker(w)) for w in range(spec.concurrency)]
        _done, pending = await asyncio.wait(tasks, timeout=spec.duration + spec.grace)
        for task in pending:
            task.cancel()
            acc.errors += 1
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError):
                await task
    wall = time.perf_counter() - start
    span = max(1e-9, window[1] - window[0])
    ms = 1000.0
    return LoadResult(
        concurrency=spec.concurrency,
        rate=spec.rate,
        streams=acc.streams,
        chunks=acc.chunks,
        window_s=span,
        chunks_per_s=acc.window_chunks / span,
        offered_per_s=spec.concurrency * spec.rate,
        gap_p50_ms=percentile(acc.gaps, 50) * ms,
        gap_p99_ms=percentile(acc.gaps, 99) * ms,
        late_p99_ms=percentile(acc.late, 99) * ms,
        ttfb_p50_ms=percentile(acc.ttfb, 50) * ms,
        ttfb_p99_ms=percentile(acc.ttfb, 99) * ms,
        errors=acc.errors,
        spliced=acc.spliced,
        wall_s=wall,
        events_per_read=acc.chunks / max(1, acc.reads),
        error_samples=acc.error_samples,
    )


def install_uvloop() -> None:
    """Use uvloop for the client too when it is installed (it is cheaper per read)."""
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="base URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--concurrency", "-c", type=int, default=16)
    parser.add_argument("--duration", "-d", type=float, default=10.0, help="seconds")
    parser.add_argument("--rate", type=float, default=50.0,
                        help="the upstream's per-stream tok/s (0: unpaced); used for lateness")
    parser.add_argument("--max-tokens", type=int, default=300)
    parser.add_argument("--max-streams", type=int, default=100_000)
    parser.add_argument("--model", default="sim-healthy")
    parser.add_argument("--api", choices=APIS, default="chat",
                        help="chat (/v1/chat/completions, default), messages (/v1/messages) "
                        "or responses (/v1/responses)")
    args = parser.parse_args(argv)
    if not args.url.startswith(("http://127.", "http://localhost")):
        parser.error("loopback URLs only")
    install_uvloop()
    spec = LoadSpec(url=args.url.rstrip("/"), concurrency=args.concurrency,
                    duration=args.duration, rate=args.rate, max_tokens=args.max_tokens,
                    model=args.model, max_streams=args.max_streams, api=args.api)
    result = asyncio.run(run_load(spec))
    print(json.dumps(asdict(result), indent=2))
    return 1 if result.errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
