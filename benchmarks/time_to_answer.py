"""Time to a complete answer, with and without the sidecar, at a vLLM-like token rate.

Starts the simulator (``--rate`` tok/s per stream, default 65 like the field report) and
a sidecar in front of it, in this process. For each API (``--api``: ``chat``,
``messages`` for Anthropic ``/v1/messages``, ``responses`` for OpenAI ``/v1/responses``)
and each model it sends the same streaming request (``max_tokens``, default 8192; the
Responses API's ``max_output_tokens``) directly to the node and through the sidecar, and
reports the seconds until the stream ended (and until the first answer token), the
tokens the node generated for it, and the ratio. Without the sidecar a runaway streams
until ``max_tokens``.

    .venv/bin/python -m benchmarks.time_to_answer                # chat, sim-loop, ~2.5 min
    .venv/bin/python -m benchmarks.time_to_answer --api chat messages responses
    .venv/bin/python -m benchmarks.time_to_answer --models sim-loop sim-cjk-loop --reps 3

Each through-the-sidecar measurement uses a fresh prompt, so the runaway memory does
not skip detection; the reported figure is the median over ``--reps``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import replace
from typing import Any

import aiohttp
import orjson
import structlog
from prometheus_client import CollectorRegistry

from sidecar.config import Config
from sidecar.obs.metrics import Metrics
from sidecar.service.app import make_app
from sidecar.service.demo import APIS, DemoApi, api_path, request_body, serve_on_free_port
from sidecar.simulator import SimulatorConfig, make_simulator_app


def answer_text(api: DemoApi, event: Any) -> str:
    """The answer text one parsed stream event of ``api`` carries ("" for none)."""
    if not isinstance(event, dict):
        return ""
    if api == "chat":
        return "".join(c.get("delta", {}).get("content") or "" for c in event.get("choices") or ()
                       if isinstance(c, dict) and isinstance(c.get("delta"), dict))
    if api == "messages":
        delta = event.get("delta")
        if (event.get("type") == "content_block_delta" and isinstance(delta, dict)
                and delta.get("type") == "text_delta"):
            return str(delta.get("text") or "")
        return ""
    if event.get("type") == "response.output_text.delta":
        return str(event.get("delta") or "")
    return ""


async def timed_stream(url: str, api: DemoApi, model: str, max_tokens: int,
                       prompt: str) -> tuple[float, float | None, str]:
    """Seconds until the stream ended, until its first answer text (None: there was
    none), and the answer."""
    body = request_body(api, max_tokens, prompt, model)
    start = time.monotonic()
    first: float | None = None
    content: list[str] = []
    timeout = aiohttp.ClientTimeout(total=max_tokens / 10 + 60)
    async with aiohttp.ClientSession(timeout=timeout) as s, s.post(
            url + api_path(api), json=body) as r:
        if r.status != 200:
            raise RuntimeError(f"{api} {model}: HTTP {r.status}: {(await r.read())[:300]!r}")
        async for line in r.content:
            if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                continue
            text = answer_text(api, orjson.loads(line[6:]))
            if text:
                if first is None:
                    first = time.monotonic() - start
                content.append(text)
    return time.monotonic() - start, first, "".join(content)


async def generated(url: str) -> float:
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
        text = await r.text()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:generation_tokens_total"))


async def run(apis: list[DemoApi], models: list[str], rate: float, max_tokens: int,
              reps: int) -> list[dict[str, Any]]:
    """Measure every API and model; print one row each and return the rows."""
    sim_cfg = SimulatorConfig(tokens_per_second=rate, max_model_len=max(32768, 2 * max_tokens))
    sim_runner, sim_url = await serve_on_free_port(make_simulator_app(sim_cfg))
    cfg = replace(Config(), upstream=sim_url)
    metrics = Metrics(CollectorRegistry(), ["*"], "bench")
    side_runner, side_url = await serve_on_free_port(make_app(cfg, metrics))
    print(f"rate {rate:g} tok/s per stream, max_tokens {max_tokens}, sidecar: median of {reps}")
    print(f"{'api':9} {'model':20} {'direct s':>9} {'direct tok':>10} {'sidecar s':>9} "
          f"{'first ans s':>11} {'sidecar tok':>11} {'ratio':>7}  answer", flush=True)
    rows: list[dict[str, Any]] = []
    try:
        for api in apis:
            for model in models:
                before = await generated(sim_url)
                direct_s, _, _ = await timed_stream(sim_url, api, model, max_tokens,
                                                    f"bench direct {api}")
                direct_tok = await generated(sim_url) - before
                times, firsts, toks, answer = [], [], [], ""
                for rep in range(reps):
                    before = await generated(sim_url)
                    seconds, first, answer = await timed_stream(
                        side_url, api, model, max_tokens, f"bench {api} {model} {rep} "
                        f"{time.time()}")
                    await asyncio.sleep(0.2)
                    times.append(seconds)
                    firsts.append(first if first is not None else float("nan"))
                    toks.append(await generated(sim_url) - before)
                med = statistics.median(times)
                row = {"api": api, "model": model, "direct_s": direct_s,
                       "direct_tokens": direct_tok, "sidecar_s": med,
                       "first_answer_s": statistics.median(firsts),
                       "sidecar_tokens": statistics.median(toks), "ratio": med / direct_s,
                       "answer": answer.strip()}
                rows.append(row)
                print(f"{api:9} {model:20} {direct_s:9.1f} {direct_tok:10.0f} {med:9.2f} "
                      f"{row['first_answer_s']:11.2f} {row['sidecar_tokens']:11.0f} "
                      f"{100 * row['ratio']:6.1f}%  {answer.strip()[:40]!r}", flush=True)
    finally:
        await side_runner.cleanup()
        await sim_runner.cleanup()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--api", nargs="+", choices=APIS, default=["chat"],
                        help="wire APIs to measure, one after another (default chat)")
    parser.add_argument("--models", nargs="+", default=["sim-loop"])
    parser.add_argument("--rate", type=float, default=65.0)
    parser.add_argument("--max-tokens", type=int, default=8192)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    asyncio.run(run(args.api, args.models, args.rate, args.max_tokens, args.reps))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
