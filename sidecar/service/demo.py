"""``runaway-sidecar demo``: the field's runaway, cut and answered, in one process.

Starts the simulated vLLM node (at a vLLM-like token rate) and a sidecar in front of it
on free loopback ports, sends the bugfix request that loops in ``<think>`` with streaming
through an official SDK, and prints what happened: which detector fired, after how many
tokens, the reissue, the answer, the time to its first token and to its end, what the
node generated, and the time to answer compared with the same request without the
sidecar.

``api`` picks the wire API the request takes (``APIS``): OpenAI chat completions through
the ``openai`` SDK (the default), Anthropic Messages (``/v1/messages``, as Claude Code
sends it) through the ``anthropic`` SDK, or OpenAI Responses (``/v1/responses``, as Codex
sends it) through the ``openai`` SDK.

Without the sidecar the request streams until ``max_tokens``; the demo measures the
node's token rate on a direct request of the same API for a few seconds and reports the
time that ``max_tokens`` takes at that rate (run ``benchmarks/time_to_answer.py`` for the
full measured comparison).
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TextIO, get_args

import aiohttp
import orjson
import structlog
from aiohttp import web
from prometheus_client import CollectorRegistry

from sidecar import __version__
from sidecar.apis.messages.api import MESSAGES
from sidecar.apis.openai.api import CHAT
from sidecar.apis.responses.api import RESPONSES
from sidecar.config import Config
from sidecar.core.wire import WireApi
from sidecar.dialects import DIALECTS
from sidecar.obs.metrics import Metrics
from sidecar.service.app import make_app
from sidecar.simulator import SimulatorConfig, make_simulator_app

PROMPT = "Our parser crashes on empty input with IndexError. Find the bug and give the fix."
MODEL = "sim-loop"
_RATE_PROBE_SECONDS = 3.0

DemoApi = Literal["chat", "messages", "responses"]
"""The wire APIs the demo can send its request through."""
APIS: tuple[DemoApi, ...] = get_args(DemoApi)
_WIRE: dict[DemoApi, WireApi] = {"chat": CHAT, "messages": MESSAGES, "responses": RESPONSES}
_SDK: dict[DemoApi, str] = {"chat": "openai", "messages": "anthropic", "responses": "openai"}


def run_demo(*, tokens_per_second: float, max_tokens: int, out: TextIO,
             api: DemoApi = "chat", probe_seconds: float = _RATE_PROBE_SECONDS) -> int:
    """Run the demo through ``api``; return the exit code (0 when the runaway was cut and
    answered, 1 when it was not, 2 when the API's SDK is not installed).
    ``probe_seconds`` is how long the direct request that measures the node's rate
    streams."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    return asyncio.run(_demo(api, tokens_per_second, max_tokens, probe_seconds, out))


async def serve_on_free_port(app: web.Application) -> tuple[web.AppRunner, str]:
    """Run ``app`` on a free loopback port; return its runner and base URL."""
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    return runner, f"http://127.0.0.1:{sock.getsockname()[1]}"


@dataclass
class _Seen:
    """What the client read of the response."""

    reasoning_tokens: int = 0
    answer: list[str] = field(default_factory=list)
    first_answer_at: float | None = None
    done_at: float = 0.0
    #: Output tokens of every attempt, as the response's usage reported them.
    output_tokens: int | None = None

    def text(self, piece: str, started: float) -> None:
        if piece:
            if self.first_answer_at is None:
                self.first_answer_at = time.monotonic() - started
            self.answer.append(piece)


def request_body(api: DemoApi, max_tokens: int, prompt: str = PROMPT,
                 model: str = MODEL) -> dict[str, Any]:
    """The demo's streaming request in ``api``'s format (the SDKs send these fields)."""
    if api == "chat":
        return {"model": model, "max_tokens": max_tokens, "stream": True,
                "messages": [{"role": "user", "content": prompt}],
                "stream_options": {"include_usage": True}}
    if api == "messages":
        return {"model": model, "max_tokens": max_tokens, "stream": True,
                "messages": [{"role": "user", "content": prompt}]}
    return {"model": model, "max_output_tokens": max_tokens, "stream": True, "input": prompt}


def api_path(api: DemoApi) -> str:
    """The ``POST`` path of ``api``."""
    return _WIRE[api].path


async def _via_chat(base: str, body: dict[str, Any]) -> _Seen:
    from openai import AsyncOpenAI  # noqa: PLC0415 - an optional extra

    seen = _Seen()
    async with AsyncOpenAI(base_url=base + "/v1", api_key="demo", max_retries=0) as client:
        started = time.monotonic()
        stream = await client.chat.completions.create(**body)
        async for chunk in stream:
            if chunk.usage is not None:
                seen.output_tokens = chunk.usage.completion_tokens
            for choice in chunk.choices:
                delta: dict[str, Any] = choice.delta.model_dump()
                if delta.get("reasoning"):
                    seen.reasoning_tokens += 1
                seen.text(delta.get("content") or "", started)
        seen.done_at = time.monotonic() - started
    return seen


async def _via_messages(base: str, body: dict[str, Any]) -> _Seen:
    from anthropic import AsyncAnthropic  # noqa: PLC0415 - an optional extra

    seen = _Seen()
    async with AsyncAnthropic(base_url=base, api_key="demo", max_retries=0) as client:
        started = time.monotonic()
        stream = await client.messages.create(**body)
        async for event in stream:
            if event.type == "content_block_delta":
                if event.delta.type == "thinking_delta":
                    seen.reasoning_tokens += 1
                elif event.delta.type == "text_delta":
                    seen.text(event.delta.text, started)
            elif event.type == "message_delta":
                seen.output_tokens = event.usage.output_tokens
        seen.done_at = time.monotonic() - started
    return seen


async def _via_responses(base: str, body: dict[str, Any]) -> _Seen:
    from openai import AsyncOpenAI  # noqa: PLC0415 - an optional extra

    seen = _Seen()
    async with AsyncOpenAI(base_url=base + "/v1", api_key="demo", max_retries=0) as client:
        started = time.monotonic()
        stream = await client.responses.create(**body)
        async for event in stream:
            if event.type == "response.reasoning_text.delta":
                seen.reasoning_tokens += 1
            elif event.type == "response.output_text.delta":
                seen.text(event.delta, started)
            elif event.type in ("response.completed", "response.incomplete"):
                usage = event.response.usage
                seen.output_tokens = usage.output_tokens if usage is not None else None
        seen.done_at = time.monotonic() - started
    return seen


_CLIENTS: dict[DemoApi, Callable[[str, dict[str, Any]], Awaitable[_Seen]]] = {
    "chat": _via_chat, "messages": _via_messages, "responses": _via_responses}


def _sdk_missing(api: DemoApi) -> bool:
    try:
        if _SDK[api] == "anthropic":
            import anthropic  # noqa: F401, PLC0415 - an optional extra
        else:
            import openai  # noqa: F401, PLC0415 - an optional extra
    except ImportError:
        return True
    return False


async def _demo(api: DemoApi, rate: float, max_tokens: int, probe_seconds: float,
                out: TextIO) -> int:
    say = _printer(out)
    if _sdk_missing(api):
        say(f"the demo needs the {_SDK[api]} SDK: pip install 'runaway-sidecar[demo]'")
        return 2
    wire = _WIRE[api]
    sim_cfg = SimulatorConfig(tokens_per_second=rate, max_model_len=max(32768, max_tokens * 2))
    sim_runner, sim_url = await serve_on_free_port(make_simulator_app(sim_cfg))
    registry = CollectorRegistry()
    cfg = replace(Config(), upstream=sim_url)
    metrics = Metrics(registry, ["*"], __version__)
    side_runner, side_url = await serve_on_free_port(make_app(cfg, metrics))
    try:
        say(f"simulated vLLM node  {sim_url}  ({rate:g} tok/s per stream)")
        say(f"runaway-sidecar      {side_url}  (mode enforce, default detectors)")
        limit = "max_output_tokens" if api == "responses" else "max_tokens"
        say(f"request: POST {wire.path} through the {_SDK[api]} SDK, model {MODEL}, stream, "
            f"{limit}={max_tokens}: {PROMPT!r}")
        say("")
        body = request_body(api, max_tokens)
        seen = await _CLIENTS[api](side_url, body)
        fired = [labels for labels, value in _sample(registry, "runaway_sidecar_runaways_total")
                 if value]
        say(f"thinking streamed: {seen.reasoning_tokens} reasoning tokens, then "
            + ("the loop was cut" if fired else "no detector fired"))
        for labels in fired:
            say(f"  detector {labels.get('detector')} fired on the {labels.get('channel')} "
                f"channel ({labels.get('mode')} mode)")
        detection = _sample(registry, "runaway_sidecar_detection_point_tokens_sum")
        if detection:
            say(f"  detection point: {int(detection[0][1])} tokens into the stream")
        off = wire.thinking_off(body, wire.off_rules(cfg, DIALECTS["vllm"]))
        patch = orjson.dumps({k: v for k, v in off.items() if body.get(k) != v}).decode()
        say(f"reissued with thinking off: the request again, with {patch} merged in")
        say(f"answer: {''.join(seen.answer).strip()!r}")
        if seen.first_answer_at is not None:
            say(f"  first answer token after {seen.first_answer_at:.1f} s, complete after "
                f"{seen.done_at:.1f} s")
        if seen.output_tokens is not None:
            say(f"  usage reported to the client (all attempts): {seen.output_tokens} "
                "output tokens")
        running = await _node_metric(sim_url, "vllm:num_requests_running")
        generated = await _node_metric(sim_url, "vllm:generation_tokens_total")
        say(f"node after the cut: num_requests_running={running:g}, "
            f"generation_tokens_total={generated:g} (max_tokens was {max_tokens})")
        say("")
        measured_rate = await measure_rate(sim_url, api, probe_seconds)
        without = max_tokens / measured_rate if measured_rate else float("inf")
        say(f"without the sidecar: the loop runs to {limit}: {max_tokens} tokens at the "
            f"measured {measured_rate:.0f} tok/s = {without:.0f} s, with no answer")
        say(f"with the sidecar:    a complete answer in {seen.done_at:.1f} s "
            f"({100 * seen.done_at / without:.1f}% of the time)")
        ok = bool(fired) and bool(seen.answer) and running == 0
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


async def measure_rate(url: str, api: DemoApi = "chat",
                       seconds: float = _RATE_PROBE_SECONDS) -> float:
    """Tokens per second of one direct stream of ``api`` over ``seconds`` (no sidecar):
    its events that carry a delta, counted from the first one (after "prefill")."""
    body = request_body(api, 100_000 // 8)
    tokens = 0
    async with aiohttp.ClientSession() as s, s.post(url + _WIRE[api].path, json=body) as r:
        while b"delta" not in await r.content.readuntil(b"\n\n"):
            pass
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            if b"delta" in await r.content.readuntil(b"\n\n"):
                tokens += 1
        elapsed = time.monotonic() - start
    return tokens / elapsed
