"""``runaway-sidecar demo``: the field's runaway, cut and answered, in one process.

Starts the simulated vLLM node (at a vLLM-like token rate) and a sidecar in front of it
on free loopback ports, sends the bugfix request that loops in ``<think>`` through the
official ``openai`` SDK with streaming, and prints what happened: which detector fired,
after how many tokens and seconds, the reissue, the answer, what the node generated,
and the time to answer compared with the same request without the sidecar.

Without the sidecar the request streams until ``max_tokens``; the demo measures the
node's token rate on a direct request for a few seconds and reports the time that
``max_tokens`` takes at that rate (run ``benchmarks/time_to_answer.py`` for the full
measured comparison).
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
from dataclasses import replace
from typing import Any, TextIO

import aiohttp
import orjson
import structlog
from aiohttp import web
from prometheus_client import CollectorRegistry

from sidecar import __version__
from sidecar.config import Config
from sidecar.core.bodies import thinking_off_patch
from sidecar.service.app import make_app
from sidecar.service.metrics import Metrics
from sidecar.simulator import SimulatorConfig, make_simulator_app

PROMPT = "Our parser crashes on empty input with IndexError. Find the bug and give the fix."
_RATE_PROBE_SECONDS = 3.0


def run_demo(*, tokens_per_second: float, max_tokens: int, out: TextIO) -> int:
    """Run the demo; return the exit code (0 when the runaway was cut and answered)."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    return asyncio.run(_demo(tokens_per_second, max_tokens, out))


async def serve_on_free_port(app: web.Application) -> tuple[web.AppRunner, str]:
    """Run ``app`` on a free loopback port; return its runner and base URL."""
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    return runner, f"http://127.0.0.1:{sock.getsockname()[1]}"


async def _demo(rate: float, max_tokens: int, out: TextIO) -> int:
    try:
        from openai import AsyncOpenAI  # noqa: PLC0415 - an optional extra
    except ImportError:
        print("the demo needs the openai SDK: pip install 'runaway-sidecar[demo]'", file=out)
        return 2
    sim_cfg = SimulatorConfig(tokens_per_second=rate, max_model_len=max(32768, max_tokens * 2))
    sim_runner, sim_url = await serve_on_free_port(make_simulator_app(sim_cfg))
    registry = CollectorRegistry()
    cfg = replace(Config(), upstream=sim_url)
    metrics = Metrics(registry, ["*"], __version__)
    side_runner, side_url = await serve_on_free_port(make_app(cfg, metrics))
    say = _printer(out)
    try:
        say(f"simulated vLLM node  {sim_url}  ({rate:g} tok/s per stream)")
        say(f"runaway-sidecar      {side_url}  (mode enforce, default detectors)")
        say(f"request: model sim-loop, stream, max_tokens={max_tokens}: {PROMPT!r}")
        say("")
        client = AsyncOpenAI(base_url=side_url + "/v1", api_key="demo", max_retries=0)
        started = time.monotonic()
        stream = await client.chat.completions.with_raw_response.create(
            model="sim-loop", max_tokens=max_tokens, stream=True,
            messages=[{"role": "user", "content": PROMPT}],
            stream_options={"include_usage": True},
        )
        reasoning_tokens, answer, first_answer_at, usage = 0, [], None, None
        async for chunk in stream.parse():
            usage = chunk.usage or usage
            for choice in chunk.choices:
                delta: dict[str, Any] = choice.delta.model_dump()
                if delta.get("reasoning"):
                    reasoning_tokens += 1
                if delta.get("content"):
                    if first_answer_at is None:
                        first_answer_at = time.monotonic() - started
                    answer.append(delta["content"])
        done_at = time.monotonic() - started
        await client.close()
        verdict = _sample(registry, "runaway_sidecar_runaways_total")
        say(f"thinking streamed: {reasoning_tokens} reasoning tokens, then the loop was cut")
        for labels, value in verdict:
            if value:
                say(f"  detector {labels.get('detector')} fired on the {labels.get('channel')} "
                    f"channel ({labels.get('mode')} mode)")
        detection = _sample(registry, "runaway_sidecar_detection_point_tokens_sum")
        if detection:
            say(f"  detection point: {int(detection[0][1])} tokens into the stream")
        patch = orjson.dumps(thinking_off_patch("sim-loop", cfg.reissue.rules)).decode()
        say(f"reissued with thinking off: the request again, with {patch} merged in")
        say(f"answer: {''.join(answer).strip()!r}")
        if first_answer_at is not None:
            say(f"  first answer token after {first_answer_at:.1f} s, complete after "
                f"{done_at:.1f} s")
        if usage is not None:
            say(f"  usage reported to the client (all attempts): {usage.completion_tokens} "
                f"completion tokens")
        running = await _node_metric(sim_url, "vllm:num_requests_running")
        generated = await _node_metric(sim_url, "vllm:generation_tokens_total")
        say(f"node after the cut: num_requests_running={running:g}, "
            f"generation_tokens_total={generated:g} (max_tokens was {max_tokens})")
        say("")
        measured_rate = await _measure_rate(sim_url)
        without = max_tokens / measured_rate if measured_rate else float("inf")
        say(f"without the sidecar: the loop runs to max_tokens: {max_tokens} tokens at the "
            f"measured {measured_rate:.0f} tok/s = {without:.0f} s, with no answer")
        say(f"with the sidecar:    a complete answer in {done_at:.1f} s "
            f"({100 * done_at / without:.1f}% of the time)")
        ok = bool(answer) and running == 0
        return 0 if ok else 1
    finally:
        await side_runner.cleanup()
        await sim_runner.cleanup()


def _printer(out: TextIO) -> Any:
    def say(line: str) -> None:
        print(line, file=out, flush=True)
    return say


def _sample(registry: CollectorRegistry, name: str) -> list[tuple[dict[str, str], float]]:
    return [(dict(s.labels), float(s.value)) for metric in registry.collect()
            for s in metric.samples if s.name == name]


async def _node_metric(url: str, name: str) -> float:
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
        text = await r.text()
    total = 0.0
    for line in text.splitlines():
        m = re.match(r"^([^{\s]+)(\{[^}]*\})?\s+(\S+)$", line)
        if m and m.group(1) == name:
            total += float(m.group(3))
    return total


async def _measure_rate(url: str) -> float:
    """Tokens per second of one direct stream over a few seconds (no sidecar)."""
    body = {"model": "sim-loop", "stream": True, "max_tokens": 100_000 // 8,
            "messages": [{"role": "user", "content": PROMPT}]}
    tokens = 0
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/chat/completions",
                                                    json=body) as r:
        await r.content.readuntil(b"\n\n")  # the role chunk, sent after "prefill"
        start = time.monotonic()
        while time.monotonic() - start < _RATE_PROBE_SECONDS:
            await r.content.readuntil(b"\n\n")
            tokens += 1
        elapsed = time.monotonic() - start
    return tokens / elapsed
