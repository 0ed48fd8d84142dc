"""Benchmark runner: every configuration in one run, alternated, medians over repetitions.

Run from the repository root (each suite starts and stops its own processes on free
loopback ports; logs go to ``--logs``; each sidecar's build is said on stderr and kept in
the ``--json`` record, see ``procs.build_of``)::

    .venv/bin/python -m benchmarks.run paced --concurrency 256 --rate 50 --duration 10 --reps 3
    .venv/bin/python -m benchmarks.run paced --concurrency 64 --rate 0 --duration 6 --reps 3
    .venv/bin/python -m benchmarks.run paced -c 256 --rate 50 --api messages \
        --configs parsing-lean,enforce
    .venv/bin/python -m benchmarks.run ttfb --requests 60 --reps 3
    .venv/bin/python -m benchmarks.run memory --streams 1000
    .venv/bin/python -m benchmarks.run workers --rate 50 --loads 128,256,384,512,640
    .venv/bin/python -m benchmarks.run paced ... --litellm /root/.cache/runaway-sidecar/litellm-venv

Suites:

- ``paced``: C streams at ``rate`` tok/s each (``--rate 0``: saturation) through each
  configuration (direct to the simulator, bare pass-through, bare parsing proxy, sidecar
  shadow, sidecar enforce, optionally LiteLLM; ``off``: the sidecar with ``--mode off``,
  its plain pass-through path; ``enforce-notext``: enforce without the text detectors;
  ``enforce-pure``: enforce on the pure-Python fallback (``RUNAWAY_SIDECAR_PURE=1``),
  where ``enforce`` runs the compiled build if there is one (``NAME-pure`` does the same
  for any sidecar configuration ``NAME`` of this checkout: ``enforce-notext-pure``);
  ``enforce-w2``: enforce with ``--workers 2``, whose busiest process's share of the CPU
  is reported too; ``shadow-record``, ``enforce-record``: with ``[record]`` on (a
  directory of their own); ``parsing-noread``: the parsing floor without aiohttp's per-read
  ``sock_read`` timer; ``parsing-lean``: the parsing floor reading the upstream through
  the sidecar's own watched-request client), in the order A B C ... A B C ... for
  ``reps`` repetitions. ``--api messages`` or ``--api responses`` sends every stream to
  Anthropic's ``/v1/messages`` or OpenAI's ``/v1/responses`` instead of chat
  completions (the floors read each API's own events). Per run: the proxy's CPU seconds
  per 1,000 chunks (its
  ``/proc`` CPU time delta over the run divided by the chunks the client received) and
  the kernel's part of them,
  throughput, inter-chunk gap and lateness percentiles, errors. Table: medians.
- ``ttfb``: C=1, ``requests`` sequential streams per configuration per repetition; the
  median time to first byte, and what each proxy adds to the direct figure.
- ``memory``: RSS growth of a proxy process with N open streams that have gone idle
  (``sim-stall`` sends 24 tokens, then nothing; with ``--tokens T`` above 24,
  ``sim-long-thinking`` reasoning stalled after T tokens by the ``stall-mid-stream``
  fault), divided by N; after a warm-up, so the figure is what one more open stream
  costs, detector state included. Streams open in waves of ``--wave`` (default 50), each
  wave idle before the next starts: all N streaming at once at 200 tok/s is more than a
  2-core machine carries, and the read buffers of that backlog (up to 64 KiB a stream,
  freed afterwards but kept by the allocator) would be counted as per-stream memory.
- ``workers``: the highest paced load (streams x rate) the sidecar holds with
  ``--workers 1`` and ``--workers 2`` (held: >= 95 % of offered chunks/s delivered, p99
  lateness <= ``--late-ms``, no errors); the simulator alone is measured the same way
  because on a small machine it, and the load generator, are the ceiling. With
  ``--cpu-quota F`` every serving process is held to F of one CPU (``cpuquota``), as if
  each worker had a core of that size.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import math
import secrets
import signal
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp

from benchmarks import cpuquota, procs
from benchmarks.loadgen import APIS, LoadSpec, install_uvloop, run_load
from benchmarks.procs import Proc, cpu_by_process, cpu_seconds, rss_bytes, running, total_times
from detectors.native import PURE_ENV

CONFIGS = ("direct", "passthrough", "parsing", "shadow", "enforce")
#: ``enforce-notext``: enforce with the text detectors switched off (budgets and stall
#: stay), to split the sidecar's cost into the watching and the text analysis.
TEXT_DETECTORS = ("recurrence", "periodic", "restatement", "sentences", "degeneration")
NO_TEXT = tuple(arg for name in TEXT_DETECTORS
                for arg in (f"--detectors.{name}-enabled", "false"))
#: ``enforce-no-NAME``: enforce with one text detector off, to see what that one costs.
ONE_OFF = "enforce-no-"
LITELLM_KEY = "sk-bench-" + secrets.token_hex(16)  # LiteLLM refuses to start without one


#: ``NAME-pure``: the sidecar configuration ``NAME`` on the pure-Python fallback
#: (``RUNAWAY_SIDECAR_PURE=1``) of the same checkout, where ``NAME`` runs the compiled
#: build if there is one (``detectors.native``): ``enforce-pure``, ``enforce-notext-pure``.
PURE = "-pure"
#: ``NAME-base``: the sidecar configuration ``NAME`` run from the ``--baseline`` checkout.
BASE = "-base"


class _Sidecar(NamedTuple):
    """How a sidecar configuration runs: its mode, its extra options, its workers, and
    whether it records (into a directory of its own)."""

    mode: str
    extra: tuple[str, ...] = ()
    workers: int = 1
    record: bool = False


#: The sidecar configurations (``-pure`` and ``-base`` take any of these).
SIDECARS: dict[str, _Sidecar] = {
    "off": _Sidecar("off"),
    "shadow": _Sidecar("shadow"),
    "enforce": _Sidecar("enforce"),
    "enforce-notext": _Sidecar("enforce", NO_TEXT),
    "enforce-w2": _Sidecar("enforce", workers=2),
    "shadow-record": _Sidecar("shadow", record=True),
    "enforce-record": _Sidecar("enforce", record=True),
    **{ONE_OFF + name: _Sidecar("enforce", (f"--detectors.{name}-enabled", "false"))
       for name in TEXT_DETECTORS},
}
#: The floors: the kind ``benchmarks.floor`` runs, and its extra options.
FLOORS: dict[str, tuple[str, tuple[str, ...]]] = {
    "passthrough": ("passthrough", ()),
    "parsing": ("parsing", ()),
    "parsing-lean": ("parsing-lean", ()),
    "parsing-noread": ("parsing", ("--read-timeout", "0")),
}


def config_error(name: str, *, baseline: bool, litellm: bool) -> str | None:
    """Why ``name`` is no configuration this run can set up (None when it is one):
    ``baseline``/``litellm`` say whether ``--baseline``/``--litellm`` were given."""
    if name == "direct" or name in FLOORS or name in SIDECARS:
        return None
    if name.endswith(PURE):
        if name.removesuffix(PURE) in SIDECARS:
            return None
        return f"{name}: {PURE} takes a sidecar configuration ({', '.join(SIDECARS)})"
    if name.endswith(BASE):
        if name.removesuffix(BASE) not in SIDECARS:
            return f"{name}: {BASE} takes a sidecar configuration ({', '.join(SIDECARS)})"
        return None if baseline else f"{name} needs --baseline"
    if name == "litellm":
        return None if litellm else "litellm needs --litellm"
    if name.startswith(ONE_OFF):
        return f"{name}: {ONE_OFF} takes one of {', '.join(TEXT_DETECTORS)}"
    return (f"unknown configuration {name!r}: one of {', '.join(('direct', *FLOORS, *SIDECARS))}"
            f", or a sidecar one with {PURE} or {BASE}")


def _sidecar(name: str, upstream: str, how: _Sidecar, root: Path = procs.ROOT) -> Proc:
    """The sidecar ``how`` says, named ``name``, from the checkout ``root``."""
    extra = how.extra
    if how.record:  # [record] on: every exchange offered to the recorder
        extra += ("--record.dir", tempfile.mkdtemp(prefix="bench-record-"))
    return procs.sidecar(name, upstream, how.mode, how.workers, root=root, extra=extra)


def _proxy(upstream: Proc, name: str, litellm: Path | None,
           baseline: Path | None) -> Proc | None:
    """The proxy of configuration ``name`` in front of ``upstream`` (None for ``direct``);
    ``ValueError`` for a name ``config_error`` refuses."""
    if name == "direct":
        return None
    if name in FLOORS:
        kind, extra = FLOORS[name]
        return procs.floor(kind, upstream.url, name, extra)
    if name in SIDECARS:
        return _sidecar(name, upstream.url, SIDECARS[name])
    if name.endswith(PURE) and name.removesuffix(PURE) in SIDECARS:
        proc = _sidecar(name, upstream.url, SIDECARS[name.removesuffix(PURE)])
        proc.env = {PURE_ENV: "1"}
        return proc
    if name.endswith(BASE) and name.removesuffix(BASE) in SIDECARS and baseline is not None:
        return _sidecar(name, upstream.url, SIDECARS[name.removesuffix(BASE)], root=baseline)
    if name == "litellm" and litellm is not None:
        return _litellm(litellm, upstream.url)
    raise ValueError(f"unknown configuration {name!r}")


def _setup(upstream: Proc, names: list[str], litellm: Path | None,
           baseline: Path | None = None) -> list[Proc]:
    """The proxies named in ``names`` (``direct`` needs none), in front of ``upstream``."""
    return [proc for name in names
            if (proc := _proxy(upstream, name, litellm, baseline)) is not None]


def _litellm(venv: Path, upstream: str) -> Proc:
    port = procs.free_port()
    cfg = Path(tempfile.mkdtemp(prefix="bench-litellm-")) / "config.yaml"
    cfg.write_text(
        "model_list:\n"
        "  - model_name: sim-healthy\n"
        "    litellm_params:\n"
        "      model: hosted_vllm/sim-healthy\n"
        f"      api_base: {upstream}/v1\n"
        "      api_key: none\n"
        "litellm_settings:\n"
        "  telemetry: false\n"
        "  turn_off_message_logging: true\n",
        encoding="utf-8")
    # Offline: the bundled model cost map, no telemetry, no update checks.
    env = {"LITELLM_MASTER_KEY": LITELLM_KEY, "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "LITELLM_TELEMETRY": "False", "LITELLM_LOG": "ERROR", "DISABLE_SCHEMA_UPDATE": "True",
           "NO_PROXY": "127.0.0.1,localhost"}
    return Proc("litellm", [str(venv / "bin" / "litellm"), "--config", str(cfg),
                            "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"],
                port, env)


def _median(rows: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else float("nan")


async def _measured(spec: LoadSpec, proxy: Proc | None, sim: Proc) -> dict[str, Any]:
    # One /proc reading of the proxy's processes at each end: their totals and, for a
    # proxy of several processes, how the work was split.
    each0 = cpu_by_process(proxy.pid) if proxy else {}
    sim0 = cpu_seconds(sim.pid)
    result = await run_load(spec)
    each1 = cpu_by_process(proxy.pid) if proxy else {}
    (user0, sys0), (user1, sys1) = total_times(each0), total_times(each1)
    each = {p: sum(t) - sum(each0.get(p, (0.0, 0.0))) for p, t in each1.items()}
    cpu = (user1 - user0) + (sys1 - sys0) if proxy else None
    sim_cpu = cpu_seconds(sim.pid) - sim0
    row = asdict(result)
    per_k = 1000.0 / max(1, result.chunks)
    row["proxy_cpu_s"] = cpu
    row["proxy_cpu_per_1k"] = cpu * per_k if cpu is not None else None
    # The kernel's share (socket reads and writes, epoll): the same for every proxy that
    # makes the same system calls, so a difference between proxies is in user space.
    row["proxy_sys_per_1k"] = (sys1 - sys0) * per_k if proxy else None
    row["sim_cpu_per_1k"] = sim_cpu * per_k
    # How a proxy of several processes (``serve --workers N``) split the work: the
    # busiest process's share of their CPU (1.0 for a single process).
    row["proxy_busiest_share"] = (max(each.values()) / sum(each.values())
                                  if each and sum(each.values()) > 0 else None)
    return row


def _print_rows(title: str, rows: dict[str, list[dict[str, Any]]],
                cols: list[tuple[str, str, str]]) -> None:
    print(f"\n{title}")
    print("| config | " + " | ".join(h for h, _, _ in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for name, runs in rows.items():
        cells = [fmt.format(_median(runs, key)) for _, key, fmt in cols]
        print(f"| {name} | " + " | ".join(cells) + " |")


async def paced(args: argparse.Namespace) -> dict[str, Any]:
    names = list(args.configs.split(","))
    if args.litellm is not None and "litellm" not in names:
        names.append("litellm")
    sim = procs.simulator("simulator", args.rate)
    with running([sim], args.logs):
        proxies = _setup(sim, names, args.litellm, args.baseline)
        with running(proxies, args.logs):
            by_name = {p.name: p for p in proxies}
            # Warm up every path (imports, pools, first-request costs) before measuring.
            for name in names:
                url = by_name[name].url if name in by_name else sim.url
                await run_load(LoadSpec(url, 4, 1.0, args.rate, max_tokens=20, ramp=0,
                                        api_key=LITELLM_KEY if name == "litellm" else None,
                                        api=args.api))
            rows: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
            for rep in range(args.reps):
                for name in names:
                    proxy = by_name.get(name)
                    spec = LoadSpec(proxy.url if proxy else sim.url, args.concurrency,
                                    args.duration, args.rate, max_tokens=args.max_tokens,
                                    api_key=LITELLM_KEY if name == "litellm" else None,
                                    api=args.api)
                    row = await _measured(spec, proxy, sim)
                    rows[name].append(row)
                    print(f"rep {rep} {name}: {row['chunks_per_s']:.0f} chunks/s, "
                          f"cpu/1k {row['proxy_cpu_per_1k'] or 0:.3f}s, "
                          f"gap p99 {row['gap_p99_ms']:.1f} ms, late p99 "
                          f"{row['late_p99_ms']:.1f} ms, errors {row['errors']}"
                          + (f", busiest process {row['proxy_busiest_share']:.0%} of its CPU"
                             if (row["proxy_busiest_share"] or 1.0) < 1.0 else ""), flush=True)
                    await asyncio.sleep(1.0)
    _print_rows(f"paced: {args.api}, C={args.concurrency} x {args.rate} tok/s, "
                f"{args.duration}s, {args.reps} reps (medians)", rows, [
                    ("chunks/s", "chunks_per_s", "{:.0f}"),
                    ("offered/s", "offered_per_s", "{:.0f}"),
                    ("proxy CPU s / 1k chunks", "proxy_cpu_per_1k", "{:.4f}"),
                    ("of which kernel", "proxy_sys_per_1k", "{:.4f}"),
                    ("sim CPU s / 1k", "sim_cpu_per_1k", "{:.4f}"),
                    ("gap p50 ms", "gap_p50_ms", "{:.1f}"),
                    ("gap p99 ms", "gap_p99_ms", "{:.1f}"),
                    ("late p99 ms", "late_p99_ms", "{:.1f}"),
                    ("events/read", "events_per_read", "{:.2f}"),
                    ("errors", "errors", "{:.0f}"),
                    ("spliced", "spliced", "{:.0f}"),
                ])
    for floor, title in (("parsing", "the bare parsing proxy"),
                         ("parsing-lean", "the lean parsing proxy (parsing-lean)")):
        base = rows.get(floor)
        if not base:
            continue
        print(f"\nratios to {title} (per repetition, then median):")
        for name, runs in rows.items():
            if name in ("direct", floor):
                continue
            ratio = [r["proxy_cpu_per_1k"] / b["proxy_cpu_per_1k"]
                     for r, b in zip(runs, base, strict=True) if b["proxy_cpu_per_1k"]]
            user = [(r["proxy_cpu_per_1k"] - r["proxy_sys_per_1k"])
                    / (b["proxy_cpu_per_1k"] - b["proxy_sys_per_1k"])
                    for r, b in zip(runs, base, strict=True)
                    if b["proxy_cpu_per_1k"] > b["proxy_sys_per_1k"]]
            added = [r["gap_p99_ms"] - b["gap_p99_ms"] for r, b in zip(runs, base, strict=True)]
            late = [r["late_p99_ms"] - b["late_p99_ms"] for r, b in zip(runs, base, strict=True)]
            print(f"  {name}: CPU/chunk x{statistics.median(ratio):.2f} "
                  f"(user space alone x{statistics.median(user) if user else math.nan:.2f}), "
                  f"gap p99 {statistics.median(added):+.1f} ms, "
                  f"late p99 {statistics.median(late):+.1f} ms")
    return {"suite": "paced", "args": _jsonable(args), "builds": _builds(proxies), "runs": rows}


async def ttfb(args: argparse.Namespace) -> dict[str, Any]:
    names = list(args.configs.split(","))
    if args.litellm is not None and "litellm" not in names:
        names.append("litellm")
    sim = procs.simulator("simulator", args.rate)
    with running([sim], args.logs):
        proxies = _setup(sim, names, args.litellm, args.baseline)
        with running(proxies, args.logs):
            by_name = {p.name: p for p in proxies}
            rows: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
            for rep in range(args.reps + 1):  # repetition 0 warms up and is dropped
                for name in names:
                    proxy = by_name.get(name)
                    spec = LoadSpec(proxy.url if proxy else sim.url, 1, 60.0, args.rate,
                                    max_tokens=2, max_streams=args.requests, ramp=0,
                                    api_key=LITELLM_KEY if name == "litellm" else None,
                                    api=args.api)
                    result = await run_load(spec)
                    if rep:
                        rows[name].append(asdict(result))
                        print(f"rep {rep} {name}: ttfb p50 {result.ttfb_p50_ms:.2f} ms, "
                              f"errors {result.errors}", flush=True)
    direct = _median(rows["direct"], "ttfb_p50_ms") if "direct" in rows else 0.0
    print(f"\nttfb at C=1, {args.requests} requests x {args.reps} reps (medians)")
    print("| config | TTFB p50 ms | added ms | errors |\n|---|---|---|---|")
    for name, runs in rows.items():
        t = _median(runs, "ttfb_p50_ms")
        print(f"| {name} | {t:.2f} | {t - direct:+.2f} | {_median(runs, 'errors'):.0f} |")
    return {"suite": "ttfb", "args": _jsonable(args), "builds": _builds(proxies), "runs": rows}


_STALL_TOKENS = 24  # what sim-stall sends before it goes silent
_SIM_CONTEXT = 8192  # the simulator's max_model_len: prompt plus output


#: Answer tokens a stream gets (``memory --answer``) before it goes idle: about 800
#: characters, past the content channel's first 256-character block.
_ANSWER_TOKENS = 200


def _answer_trace(reasoning_tokens: int) -> tuple[str, int]:
    """A replay trace (JSONL line) of at least ``reasoning_tokens`` tokens of the packaged
    healthy reasoning followed by a long answer, and the token events after which to stall
    so a stream is idle :data:`_ANSWER_TOKENS` tokens into its answer."""
    from sidecar.simulator.engine.behaviours import healthy_traces
    from sidecar.simulator.engine.tokenizer import tokenize

    traces = healthy_traces()
    reasoning = ""
    while len(tokenize(reasoning)) < reasoning_tokens:
        reasoning += "".join(t.reasoning or "" for t in traces)
    reasoning = "".join(tokenize(reasoning)[:reasoning_tokens])
    answer = "\n\n".join(t.content for t in traces)
    text = f"<think>\n{reasoning}\n</think>\n\n{answer}"
    line = json.dumps({"id": "memory-answer", "text": text})
    return line, len(tokenize(f"\n{reasoning}\n")) + _ANSWER_TOKENS


def _prompt(i: int, chars: int) -> str:
    """Stream ``i``'s user message: a short line, then ``chars`` characters of code to fix
    (a coding agent's request carries tens of kilobytes of it)."""
    if not chars:
        return f"idle {i}"
    unit = ("def total(rows):\n    s = 0\n    for r in rows:\n        s += r['amount']\n"
            "    return s / len(rows)\n\n")
    code = (unit * (chars // len(unit) + 1))[:chars]
    return f"idle {i}: fix the bug in this module.\n```python\n{code}\n```"


async def _hold_idle(url: str, n: int, tokens: int, settle: float,
                     measure: Callable[[], int], *, answer: bool = False,
                     wave: int = 50, prompt_chars: int = 0) -> tuple[int, int]:
    """Open ``n`` streams that go silent after ``tokens`` token events (sim-stall for 24,
    sim-replay of :func:`_answer_trace` with ``answer``, otherwise sim-long-thinking; with
    a stall-mid-stream fault), ``wave`` at a time (each wave idle before the next opens),
    each with a user message of about ``prompt_chars`` characters (:func:`_prompt`), wait
    until each saw them and ``settle`` seconds passed, return (streams held, measure())
    and close them."""
    seen = [0]
    failures: list[Exception] = []
    # Notified when a stream reaches its idle point or fails.
    progress = asyncio.Condition()
    release = asyncio.Event()
    headers = {"Content-Type": "application/json"}
    # No max_tokens: the simulator then allows what its context (8,192) leaves, as vLLM
    # does; the stall fault stops each stream long before that.
    if answer:
        body: dict[str, Any] = {"model": "sim-replay", "stream": True}
        headers |= {"X-Sim-Fault": "stall-mid-stream", "X-Sim-Fault-After": str(tokens)}
    elif tokens == _STALL_TOKENS:
        # The prompt counts against the context too: sim-stall stops after 24 anyway.
        body = {"model": "sim-stall", "stream": True,
                "max_tokens": 4096 if not prompt_chars else 256}
    else:
        body = {"model": "sim-long-thinking", "stream": True}
        headers |= {"X-Sim-Fault": "stall-mid-stream", "X-Sim-Fault-After": str(tokens)}

    async def stream(session: aiohttp.ClientSession, i: int) -> None:
        data = json.dumps({**body, "messages": [{"role": "user",
                                                  "content": _prompt(i, prompt_chars)}]})
        async with session.post(url + "/v1/chat/completions", data=data,
                                headers=headers) as resp:
            if resp.status != 200:
                raise RuntimeError(f"stream {i}: HTTP {resp.status}: "
                                   f"{(await resp.read())[:300]!r}")
            got = 0
            while got < tokens:
                chunk = await resp.content.readany()
                if not chunk:
                    raise RuntimeError(f"stream {i} ended after {got} of {tokens} events")
                got += chunk.count(b"\n\n")
            seen[0] += 1
            async with progress:
                progress.notify_all()
            await release.wait()

    async def one(session: aiohttp.ClientSession, i: int) -> None:
        try:
            await stream(session, i)
        except Exception as exc:  # reported by _hold_idle below, not lost in its task
            failures.append(exc)
            async with progress:
                progress.notify_all()

    async def open_in_waves(session: aiohttp.ClientSession) -> None:
        for start in range(0, n, wave):
            end = min(n, start + wave)
            tasks.extend(asyncio.create_task(one(session, i)) for i in range(start, end))
            async with progress:
                await progress.wait_for(lambda end=end: seen[0] >= end or bool(failures))

    connector = aiohttp.TCPConnector(limit=0)
    tasks: list[asyncio.Task[None]] = []
    async with aiohttp.ClientSession(connector=connector) as session:
        opener = asyncio.create_task(open_in_waves(session))
        try:
            # Each wave streams its tokens at the simulator's 200 tok/s.
            async with asyncio.timeout(60 + 2 * (n / wave) * (tokens / 200)), progress:
                await progress.wait_for(lambda: seen[0] >= n or bool(failures))
            if failures:
                raise failures[0]
            await asyncio.sleep(settle)
            value = measure()
        finally:
            release.set()
            opener.cancel()
            for t in tasks:
                t.cancel()
            await asyncio.gather(opener, *tasks, return_exceptions=True)
    return seen[0], value


async def memory(args: argparse.Namespace) -> dict[str, Any]:
    chosen = args.configs if args.configs != ",".join(CONFIGS) else "parsing,enforce"
    names = [n for n in chosen.split(",") if n != "direct"]
    tokens = args.tokens
    extra: tuple[str, ...] = ()
    if args.answer:
        line, tokens = _answer_trace(args.tokens)
        replay = Path(tempfile.mkdtemp(prefix="memory-answer-")) / "answer.jsonl"
        replay.write_text(line + "\n", encoding="utf-8")
        extra = ("--replay", str(replay))
    if tokens > _SIM_CONTEXT - 100:
        raise SystemExit(f"memory: {tokens} token events per stream do not fit the "
                         f"simulator's context of {_SIM_CONTEXT} tokens (prompt included)")
    sim = procs.simulator("simulator", 200.0, extra)
    out: dict[str, Any] = {}
    with running([sim], args.logs):
        proxies = _setup(sim, names, None, args.baseline)
        with running(proxies, args.logs):
            for proxy in proxies:
                # Warm up with the same kind of streams, so the growth is per stream.
                await _hold_idle(proxy.url, args.streams // 10, tokens, 0.5,
                                 lambda: 0, answer=args.answer, wave=args.wave,
                                 prompt_chars=args.prompt_chars)
                await asyncio.sleep(1.0)
                before = rss_bytes(proxy.pid)
                held, after = await _hold_idle(proxy.url, args.streams, tokens, 1.0,
                                               functools.partial(rss_bytes, proxy.pid),
                                               answer=args.answer, wave=args.wave,
                                               prompt_chars=args.prompt_chars)
                per = (after - before) / max(1, held)
                out[proxy.name] = {"streams": held, "rss_before": before, "rss_after": after,
                                   "bytes_per_stream": per}
                print(f"{proxy.name}: {held} idle streams, RSS {before / 2**20:.1f} -> "
                      f"{after / 2**20:.1f} MiB, {per / 1024:.1f} KiB per stream", flush=True)
                await asyncio.sleep(1.0)
    return {"suite": "memory", "args": _jsonable(args), "builds": _builds(proxies),
            "results": out}


async def workers(args: argparse.Namespace) -> dict[str, Any]:
    loads = [int(x) for x in args.loads.split(",")]
    sim = procs.simulator("simulator", args.rate)
    out: dict[str, Any] = {}
    with running([sim], args.logs):
        targets: list[tuple[str, Proc | None]] = [("direct", None)]
        targets += [(f"workers={w}", procs.sidecar(f"workers{w}", sim.url, "enforce", w))
                    for w in (1, 2)]
        for name, proxy in targets:
            ctx = running([proxy], args.logs) if proxy else running([], args.logs)
            with ctx, contextlib.ExitStack() as quota:
                serving = _serving_pids(proxy) if proxy else []
                if serving and args.cpu_quota:
                    quota.enter_context(cpuquota.limited(serving, args.cpu_quota))
                await run_load(LoadSpec(proxy.url if proxy else sim.url, 8, 1.0, args.rate,
                                        max_tokens=20, ramp=0))
                best = 0
                steps = []
                for c in loads:
                    spec = LoadSpec(proxy.url if proxy else sim.url, c, args.duration,
                                    args.rate, max_tokens=args.max_tokens)
                    throttled0 = _throttled(serving, args.cpu_quota)
                    row = await _measured(spec, proxy, sim)
                    row["throttled_s"] = _throttled(serving, args.cpu_quota) - throttled0
                    held = (row["chunks_per_s"] >= 0.95 * row["offered_per_s"]
                            and row["late_p99_ms"] <= args.late_ms and row["errors"] == 0)
                    row["held"] = held
                    steps.append(row)
                    print(f"{name} C={c}: {row['chunks_per_s']:.0f}/{row['offered_per_s']:.0f}"
                          f" chunks/s, late p99 {row['late_p99_ms']:.0f} ms, cpu/1k "
                          f"{row['proxy_cpu_per_1k'] or 0:.4f}"
                          + (f", proxy CPU {row['proxy_cpu_s']:.1f} s, "
                             f"throttled {row['throttled_s']:.1f} s"
                             if args.cpu_quota and proxy else "")
                          + f", held={held}", flush=True)
                    await asyncio.sleep(1.0)
                    if not held:
                        break
                    best = c
                out[name] = {"highest_held_streams": best,
                             "highest_held_chunks_per_s": best * args.rate, "steps": steps}
    if args.cpu_quota:
        print(f"\nEach serving process held to {args.cpu_quota:g} of a CPU (cgroup quota).")
    print("\n| target | highest held load (streams x rate) | chunks/s |\n|---|---|---|")
    for name, res in out.items():
        print(f"| {name} | {res['highest_held_streams']} x {args.rate:g} | "
              f"{res['highest_held_chunks_per_s']:.0f} |")
    return {"suite": "workers", "args": _jsonable(args),
            "builds": _builds([p for _, p in targets if p]), "results": out}


def _serving_pids(proxy: Proc) -> list[int]:
    """The processes that proxy: ``serve --workers N`` with N > 1 is a supervisor (which
    only waits) and N workers below it; with one worker, the process itself."""
    below = procs.descendants(proxy.pid)
    return [p for p in below if p != proxy.pid] if len(below) > 1 else below


def _throttled(pids: list[int], quota: float | None) -> float:
    """Seconds the CPU quota held ``pids`` back so far, summed (0 without a quota)."""
    return sum(cpuquota.throttled_seconds(p) for p in pids) if quota else 0.0


def _builds(proxies: list[Proc]) -> dict[str, str]:
    """The build each sidecar of ``proxies`` ran (``Proc.build``), for the JSON record."""
    return {p.name: p.build for p in proxies if p.sidecar}


def _jsonable(args: argparse.Namespace) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
            if k != "func"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="suite", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--configs", default=",".join(CONFIGS))
    common.add_argument("--litellm", type=Path, metavar="VENV",
                        help="venv with litellm[proxy]; adds the 'litellm' configuration")
    common.add_argument("--logs", type=Path,
                        default=Path(tempfile.gettempdir()) / "runaway-sidecar-bench")
    common.add_argument("--json", type=Path, help="write every run's figures here")
    common.add_argument("--baseline", type=Path, metavar="DIR",
                        help="a copy of the repository (e.g. git worktree of an older "
                        "commit): configurations 'enforce-base'/'shadow-base' run its sidecar")
    common.add_argument("--rate", type=float, default=50.0)
    common.add_argument("--duration", type=float, default=10.0)
    common.add_argument("--max-tokens", type=int, default=300)
    p = sub.add_parser("paced", parents=[common])
    p.add_argument("--concurrency", "-c", type=int, default=256)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--api", choices=APIS, default="chat",
                   help="the wire API of every stream: chat (default), messages "
                   "(Anthropic /v1/messages) or responses (OpenAI /v1/responses)")
    p.set_defaults(func=paced)
    p = sub.add_parser("ttfb", parents=[common])
    p.add_argument("--requests", type=int, default=60)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--api", choices=APIS, default="chat",
                   help="the wire API of every request (as for paced)")
    p.set_defaults(func=ttfb)
    p = sub.add_parser("memory", parents=[common])
    p.add_argument("--streams", type=int, default=1000)
    p.add_argument("--tokens", type=int, default=_STALL_TOKENS,
                   help="token events each stream gets before it goes idle (default 24; "
                   "at most about 8,000, the simulator's context)")
    p.add_argument("--answer", action="store_true",
                   help=f"streams go idle {_ANSWER_TOKENS} tokens into their answer, after "
                        "--tokens tokens of reasoning (the answer phase of a stream)")
    p.add_argument("--wave", type=int, default=50,
                   help="streams opened at a time, each wave idle before the next "
                        "(default 50; --wave N with N = --streams opens all at once)")
    p.add_argument("--prompt-chars", type=int, default=0, metavar="N",
                   help="each stream's user message carries N characters of code "
                        "(default 0: a few words); what the proxies keep of the request "
                        "while a stream is open")
    p.set_defaults(func=memory)
    p = sub.add_parser("workers", parents=[common])
    p.add_argument("--loads", default="128,256,384,512,640")
    p.add_argument("--late-ms", type=float, default=200.0)
    p.add_argument("--cpu-quota", type=float, metavar="F",
                   help="hold each serving process to F of one CPU (e.g. 0.3) through a "
                        "cgroup of its own (root, or a delegated cgroup): one worker gets F, "
                        "two get F each, as if each had a core, at a size the rig can feed "
                        "(see benchmarks/cpuquota.py)")
    p.set_defaults(func=workers, duration=8.0)
    args = parser.parse_args(argv)
    for name in args.configs.split(","):
        error = config_error(name, baseline=args.baseline is not None,
                             litellm=getattr(args, "litellm", None) is not None)
        if error is not None:
            parser.error(error)
    if getattr(args, "api", "chat") != "chat" and (
            args.litellm is not None or "litellm" in args.configs.split(",")):
        parser.error("the litellm configuration is set up for chat completions only")
    install_uvloop()
    started = time.time()

    async def suite() -> dict[str, Any]:
        # SIGTERM (e.g. from ``timeout``) cancels the suite, so the ``running`` blocks
        # still stop every process this run started.
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        out: dict[str, Any] = await args.func(args)
        return out

    result = asyncio.run(suite())
    result["wall_s"] = time.time() - started
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
