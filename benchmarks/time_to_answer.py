"""Time to a complete answer, with and without the sidecar, at a vLLM-like token rate.

Starts the simulator (``--rate`` tok/s per stream, default 65 like the field report) and
a sidecar in front of it, in this process. For each model it sends the same streaming
chat request (``max_tokens``, default 8192) directly to the node and through the
sidecar, and reports the seconds until the stream ended, the tokens the node generated
for it, and the ratio. Without the sidecar a runaway streams until ``max_tokens``.

    .venv/bin/python -m benchmarks.time_to_answer                # sim-loop, ~2.5 min
    .venv/bin/python -m benchmarks.time_to_answer --models sim-loop sim-cjk-loop --reps 3

Each through-the-sidecar measurement uses a fresh prompt, so the runaway memory does
not skip detection; the reported figure is the median over ``--reps``.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import time
from dataclasses import replace

import aiohttp
import orjson
import structlog
from prometheus_client import CollectorRegistry

from sidecar.config import Config
from sidecar.service.app import make_app
from sidecar.service.demo import serve_on_free_port
from sidecar.service.metrics import Metrics
from sidecar.simulator import SimulatorConfig, make_simulator_app


async def timed_stream(url: str, model: str, max_tokens: int, prompt: str) -> tuple[float, str]:
    """Seconds until the stream ended, and its content."""
    body = {"model": model, "stream": True, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": prompt}]}
    start = time.monotonic()
    content: list[str] = []
    timeout = aiohttp.ClientTimeout(total=max_tokens / 10 + 60)
    async with aiohttp.ClientSession(timeout=timeout) as s, s.post(
            url + "/v1/chat/completions", json=body) as r:
        async for line in r.content:
            m = re.search(rb'"content":"((?:[^"\\]|\\.)*)"', line)
            if m:
                content.append(orjson.loads(b'"' + m.group(1) + b'"'))
    return time.monotonic() - start, "".join(content)


async def generated(url: str) -> float:
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
        text = await r.text()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:generation_tokens_total"))


async def run(models: list[str], rate: float, max_tokens: int, reps: int) -> None:
    sim_cfg = SimulatorConfig(tokens_per_second=rate, max_model_len=max(32768, 2 * max_tokens))
    sim_runner, sim_url = await serve_on_free_port(make_simulator_app(sim_cfg))
    cfg = replace(Config(), upstream=sim_url)
    metrics = Metrics(CollectorRegistry(), ["*"], "bench")
    side_runner, side_url = await serve_on_free_port(make_app(cfg, metrics))
    print(f"rate {rate:g} tok/s per stream, max_tokens {max_tokens}")
    print(f"{'model':22} {'direct s':>9} {'direct tok':>10} {'sidecar s':>9} {'sidecar tok':>11} "
          f"{'ratio':>7}  answer")
    try:
        for model in models:
            before = await generated(sim_url)
            direct_s, _ = await timed_stream(sim_url, model, max_tokens, "bench direct")
            direct_tok = await generated(sim_url) - before
            times, toks, answer = [], [], ""
            for rep in range(reps):
                before = await generated(sim_url)
                seconds, answer = await timed_stream(side_url, model, max_tokens,
                                                     f"bench {model} {rep} {time.time()}")
                await asyncio.sleep(0.2)
                times.append(seconds)
                toks.append(await generated(sim_url) - before)
            med = statistics.median(times)
            print(f"{model:22} {direct_s:9.1f} {direct_tok:10.0f} {med:9.2f} "
                  f"{statistics.median(toks):11.0f} {100 * med / direct_s:6.1f}%  "
                  f"{answer.strip()[:40]!r}")
    finally:
        await side_runner.cleanup()
        await sim_runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["sim-loop"])
    parser.add_argument("--rate", type=float, default=65.0)
    parser.add_argument("--max-tokens", type=int, default=8192)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    asyncio.run(run(args.models, args.rate, args.max_tokens, args.reps))


if __name__ == "__main__":
    main()
