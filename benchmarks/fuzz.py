"""Fuzz the sidecar's parsers and the proxy end to end, many cases, and report the count
and the time.

    .venv/bin/python benchmarks/fuzz.py --cases 100000 --e2e 2000 --seed 1

Pure targets (SSE decoder, stream model, aggregator, watched attempt, reissue bodies)
check the properties in ``tests/reliability/properties.py`` on random inputs: captured
vLLM streams cut and mutated, SSE-ish token soup, raw bytes, invalid UTF-8, huge lines,
chunk objects with any JSON type in any field, bodies nested up to 1,100 levels. The
end-to-end target serves random upstream replies through a real sidecar on loopback
(``tests/reliability/harness.py``). Exits 1 on the first violation, printing the seed and
case index so it can be replayed. CI runs a bounded version through pytest instead.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import random
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson

from tests.reliability import properties as p
from tests.reliability.harness import (
    RawUpstream,
    random_body,
    random_case,
    run_case,
    start_sidecar,
)

CAPTURES = Path(__file__).resolve().parent.parent / "tests/data/captures/vllm-0.32.0"
STREAMS = [f.read_bytes() for f in sorted(CAPTURES.glob("*.sse"))]
WEIRD: list[Any] = [None, True, False, 0, -1, 2**63 - 1, -(2**63), 1.5, -0.0, "", "x",
                    "<think>", "</think>", "\ud7ff\u00e9", [], {}, [None], {"a": 1}, [[[]]]]


def any_json(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.5:
        return rng.choice(WEIRD)
    if roll < 0.75:
        return [any_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["a", "index", "content", "text", "id"]): any_json(rng, depth + 1)
            for _ in range(rng.randint(0, 3))}


def maybe(rng: random.Random, good: Any) -> Any:
    return good if rng.random() < 0.6 else any_json(rng)


def chunk(rng: random.Random) -> dict[str, Any]:
    choice = {"index": maybe(rng, rng.randint(0, 2)),
              "delta": maybe(rng, {"reasoning": maybe(rng, "think "),
                                   "content": maybe(rng, rng.choice(["a", "<thi", "nk>b"])),
                                   "tool_calls": maybe(rng, [{"index": maybe(rng, 0),
                                                              "function": maybe(rng, {
                                                                  "name": "f",
                                                                  "arguments": "{"})}])}),
              "text": maybe(rng, "t"), "finish_reason": maybe(rng, None),
              "logprobs": maybe(rng, None), "token_ids": maybe(rng, [1])}
    out = {"id": maybe(rng, "c"), "created": maybe(rng, 1), "model": maybe(rng, "m"),
           "choices": maybe(rng, [choice]),
           "usage": maybe(rng, {"prompt_tokens": maybe(rng, 5),
                                "completion_tokens": maybe(rng, 7),
                                "completion_tokens_details": maybe(rng, {
                                    "reasoning_tokens": maybe(rng, 3)})})}
    if rng.random() < 0.05:
        out["error"] = any_json(rng)
    return {k: v for k, v in out.items() if rng.random() < 0.9}


def stream_bytes(rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.3:
        data = bytearray(rng.choice(STREAMS))
        for _ in range(rng.randint(0, 6)):
            pos = rng.randrange(len(data) + 1)
            data[pos:pos + rng.randint(0, 30)] = rng.randbytes(rng.randint(0, 8))
        return bytes(data[: rng.randint(0, len(data))])
    if roll < 0.5:
        return b"".join(b"data: " + orjson.dumps(chunk(rng)) + rng.choice(
            [b"\n\n", b"\r\n\r\n", b"\r\r", b"\n"]) for _ in range(rng.randint(0, 8)))
    if roll < 0.55:
        return b"data: " + b"x" * rng.randint(1, 3 << 20)  # a huge line
    return random_body(rng)


def http1_bytes(rng: random.Random) -> bytes:
    """An upstream response: ``stream_bytes`` as a chunked, length or close-framed body,
    then maybe mutated, or random bytes."""
    body = stream_bytes(rng)[:100_000]
    framing = rng.choice(["chunked", "length", "close", "noise"])
    if framing == "noise":
        return rng.randbytes(rng.randint(0, 200))
    if framing == "chunked":
        cut = sorted(rng.randint(0, len(body)) for _ in range(rng.randint(0, 5)))
        parts = [body[a:b] for a, b in zip([0, *cut], [*cut, len(body)], strict=True)]
        wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"".join(
            f"{len(x):x}\r\n".encode() + x + b"\r\n" for x in parts if x) + b"0\r\n\r\n"
    elif framing == "length":
        wire = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    else:
        wire = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + body
    data = bytearray(wire)
    for _ in range(rng.choice([0, 0, 1, 3])):
        pos = rng.randrange(len(data) + 1)
        data[pos:pos + rng.randint(0, 10)] = rng.randbytes(rng.randint(0, 6))
    return bytes(data)


def nested(rng: random.Random) -> Any:
    value: Any = rng.choice(WEIRD)
    for i in range(rng.choice([0, 5, 200, 254, 255, 600, 1100])):
        value = [value] if i % 2 else {"k": value}
    return value


def body(rng: random.Random) -> dict[str, Any]:
    keys = ["model", "messages", "prompt", "n", "stream", "stream_options", "tools",
            "chat_template_kwargs", "reasoning_effort", "think", "temperature", "max_tokens"]
    out = {k: any_json(rng) for k in keys if rng.random() < 0.4}
    if rng.random() < 0.5:
        out["model"] = rng.choice(["Qwen/Qwen3-8B", "deepseek-r1", "glm-4", "x"])
    if rng.random() < 0.5:
        out["messages"] = [{"role": maybe(rng, "user"), "content": maybe(rng, "hi")}
                           for _ in range(rng.randint(0, 3))]
    if rng.random() < 0.1:
        out["messages"] = [{"role": "user", "content": nested(rng)}]
    return out


def cuts(rng: random.Random, n: int) -> list[int]:
    return [rng.randint(0, max(n, 1)) for _ in range(rng.randint(0, 6))]


def route(rng: random.Random) -> Any:
    return rng.choice(["chat", "completions"])


TARGETS: dict[str, Callable[[random.Random], object]] = {
    "sse": lambda r: (d := stream_bytes(r), p.check_sse(d, cuts(r, len(d)),
                                                        r.choice([64, 4096, 1 << 20]))),
    "http1": lambda r: (d := http1_bytes(r), p.check_http1(d, cuts(r, len(d)))),
    "stream_model": lambda r: p.check_stream_model(
        route(r), [orjson.dumps(chunk(r)) if r.random() < 0.8 else r.randbytes(20)
                   for _ in range(r.randint(1, 6))], r.random() < 0.3),
    "aggregator": lambda r: p.check_aggregator(route(r), [chunk(r)
                                                          for _ in range(r.randint(1, 6))]),
    "attempt": lambda r: p.check_attempt(route(r), [stream_bytes(r)
                                                    for _ in range(r.randint(1, 3))],
                                         number=r.randint(0, 1), aggregate=r.random() < 0.5),
    "reissue": lambda r: p.check_reissue(body(r), client_stream=r.random() < 0.5,
                                         open_choices=r.randint(1, 3),
                                         fallback=r.choice([None, "other-model"]),
                                         reasoning="r" * r.randint(0, 50)),
}


def run_pure(cases: int, seed: int) -> dict[str, tuple[int, float]]:
    stats: dict[str, tuple[int, float]] = {}
    per = cases // len(TARGETS)
    for name, target in TARGETS.items():
        started = time.perf_counter()
        for i in range(per):
            rng = random.Random(f"{seed}:{name}:{i}")
            try:
                target(rng)
            except Exception:
                traceback.print_exc()
                print(f"VIOLATION target={name} seed={seed} case={i}")
                sys.exit(1)
        stats[name] = (per, time.perf_counter() - started)
    return stats


async def run_e2e(cases: int, seed: int) -> tuple[int, float, collections.Counter[str]]:
    import aiohttp

    rng = random.Random(seed)
    batch = {str(i): random_case(rng) for i in range(cases)}
    upstream = RawUpstream({k: c.reply() for k, c in batch.items()})
    await upstream.start()
    sidecar, _ = await start_sidecar(upstream.url, mode="shadow",
                                     upstream_read_timeout_seconds=5.0)
    url = str(sidecar.make_url("")).rstrip("/")
    outcomes: collections.Counter[str] = collections.Counter()
    started = time.perf_counter()
    try:
        async with aiohttp.ClientSession() as session:
            for key, case in batch.items():
                try:
                    outcomes[await run_case(session, url, key, case)] += 1
                except (AssertionError, TimeoutError):
                    traceback.print_exc()
                    print(f"VIOLATION target=e2e seed={seed} case={key}: {case}")
                    sys.exit(1)
    finally:
        await sidecar.close()
        await upstream.close()
    assert upstream.opened == upstream.closed, "upstream connections left open"
    return cases, time.perf_counter() - started, outcomes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=100_000, help="pure cases in total")
    ap.add_argument("--e2e", type=int, default=1_000, help="end-to-end cases")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    from sidecar.obs.logs import configure_logging

    configure_logging("json", "error")  # one access line per e2e case is just noise here
    started = time.perf_counter()
    stats = run_pure(args.cases, args.seed)
    e2e, e2e_s, outcomes = asyncio.run(run_e2e(args.e2e, args.seed))
    total = sum(n for n, _ in stats.values()) + e2e
    for name, (n, secs) in stats.items():
        print(f"{name:13s} {n:8d} cases {secs:8.1f} s  {n / secs:9.0f}/s")
    print(f"{'e2e':13s} {e2e:8d} cases {e2e_s:8.1f} s  {e2e / e2e_s:9.0f}/s  "
          f"{dict(sorted(outcomes.items()))}")
    print(f"total {total} cases, 0 violations, {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
