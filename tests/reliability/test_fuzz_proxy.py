"""End-to-end fuzz: random upstream bytes through the real sidecar; the client always
gets the pass-through bytes or a well-formed error, and never waits past a deadline."""

from __future__ import annotations

import collections
import random

import aiohttp
import orjson

from tests.reliability.harness import RawUpstream, Reply, random_case, run_case, start_sidecar

CASES = 150


async def test_random_upstream_bytes_never_break_the_client() -> None:
    """150 random upstream replies (valid, mutated, truncated, noise, RST) x client kinds."""
    rng = random.Random(8)
    cases = {str(i): random_case(rng) for i in range(CASES)}
    upstream = RawUpstream({k: c.reply() for k, c in cases.items()})
    await upstream.start()
    sidecar, _ = await start_sidecar(upstream.url, mode="shadow",
                                     upstream_read_timeout_seconds=5.0)
    url = str(sidecar.make_url("")).rstrip("/")
    outcomes: collections.Counter[str] = collections.Counter()
    try:
        async with aiohttp.ClientSession() as session:
            for key, case in cases.items():
                outcomes[await run_case(session, url, key, case)] += 1
    finally:
        await sidecar.close()
        await upstream.close()
    # The generator must actually reach the interesting outcomes, not only one of them.
    assert min(outcomes[k] for k in ("stream_exact", "stream_error", "aggregated")) > 0
    assert sum(v for k, v in outcomes.items() if k.startswith("error_")) > 10
    assert upstream.opened == upstream.closed


async def test_deeply_nested_body_is_passed_through() -> None:
    """A body nested deeper than orjson re-serializes goes to the upstream unwatched."""
    upstream = RawUpstream(default=Reply(
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"))
    await upstream.start()
    sidecar, _ = await start_sidecar(upstream.url)
    deep = b"[" * 600 + b"]" * 600
    raw = b'{"model":"m","stream":true,"messages":' + deep + b"}"
    async with aiohttp.ClientSession() as s, s.post(sidecar.make_url("/v1/chat/completions"),
                                                    data=raw) as r:
        status, data = r.status, await r.read()
    await sidecar.close()
    await upstream.close()
    assert (status, data) == (400, b"{}")
    assert len(upstream.requests) == 1


async def test_huge_n_is_passed_through_without_bookkeeping() -> None:
    """n=10**12 reaches the upstream unwatched instead of allocating per-choice state."""
    upstream = RawUpstream(default=Reply(
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"))
    await upstream.start()
    sidecar, _ = await start_sidecar(upstream.url)
    body = {"model": "m", "n": 10**12, "stream": False, "messages": [{"role": "user",
                                                                     "content": "x"}]}
    async with aiohttp.ClientSession() as s, s.post(sidecar.make_url("/v1/chat/completions"),
                                                    data=orjson.dumps(body)) as r:
        status = r.status
    await sidecar.close()
    await upstream.close()
    assert status == 400
