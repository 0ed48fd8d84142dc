"""Python bytecode per chunk: what each proxy executes per SSE event, counted, not timed.

Run from the repository root::

    .venv/bin/python -m benchmarks.opcodes [--configs parsing,enforce] [--streams 8]
        [--duration 8] [--baseline DIR] [--top 12] [--api chat|messages|responses]

Each proxy runs under ``benchmarks/traced.py``, which counts every Python bytecode
instruction the process executes, by function: aiohttp's and the standard library's as
well as the proxy's own. C code (orjson, uvloop, the kernel) is not counted. A warm-up
load runs first; then the counts start from zero, a paced load runs (``--streams``
streams at ``--rate`` tokens per second, ``--max-tokens`` tokens each, for
``--duration`` seconds), and the count is divided by the chunks the clients received.

Why count: on a shared machine the CPU per chunk of one and the same build moves by 10 to
20 % from run to run (``paced``), so a change worth a few percent cannot be seen there.
The count is the same from run to run (the input and the code decide it), and user-space
CPU per chunk under paced load follows it
(``benchmarks/results/2026-12-04-04-bytecode-per-chunk.md``). It is a guide for
comparing builds, not a replacement for ``paced``: the targets are judged on CPU time.

The tracer makes a proxy about twenty times slower, so the load is small; at 8 streams
of 50 tokens per second each read is still one event, as at 256 x 50 untraced (the table
shows events per read).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import tempfile
import time
from pathlib import Path

import orjson

from benchmarks import counting, procs
from benchmarks.loadgen import LoadResult, LoadSpec, install_uvloop, run_load
from benchmarks.procs import ROOT, Proc, running
from benchmarks.run import _setup

TRACED = ROOT / "benchmarks" / "traced.py"
#: Configurations this suite can trace (proxies: ``direct`` has none, LiteLLM is not ours).
KNOWN = ("passthrough", "parsing", "parsing-lean", "off", "shadow", "enforce", "enforce-notext",
         "shadow-record", "enforce-record",
         "enforce-pure", "enforce-base", "shadow-base")


def traced(proc: Proc, out: Path) -> Proc:
    """``proc`` (a ``python -m MODULE`` server) run under the bytecode counter."""
    if proc.cmd[1] != "-m":
        raise ValueError(f"{proc.name}: not a 'python -m' server")
    proc.cmd = [proc.cmd[0], str(TRACED), str(out), *proc.cmd[2:]]
    return proc


def _window(proc: Proc, out: Path, timeout: float = 10.0) -> dict[str, int]:
    """Ask the traced ``proc`` for its counts since the last ask; wait for them."""
    with contextlib.suppress(FileNotFoundError):
        out.unlink()
    assert proc.popen is not None
    proc.popen.send_signal(signal.SIGUSR2)
    deadline = time.monotonic() + timeout
    while not out.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{proc.name} wrote no counts within {timeout:g} s")
        time.sleep(0.05)
    counts: dict[str, int] = orjson.loads(out.read_bytes())
    return counts


async def measure(name: str, sim: Proc, args: argparse.Namespace) -> tuple[LoadResult,
                                                                               dict[str, int]]:
    """One configuration: warm up, count a paced load, return the load and the counts."""
    out = Path(tempfile.mkdtemp(prefix="bench-opcodes-")) / f"{name}.json"
    proc = traced(_setup(sim, [name], None, args.baseline)[0], out)
    with running([proc], args.logs):
        await run_load(LoadSpec(proc.url, args.streams, 2.0, args.rate,
                                max_tokens=args.max_tokens, api=args.api))
        _window(proc, out)  # the warm-up's counts, dropped
        result = await run_load(LoadSpec(proc.url, args.streams, args.duration, args.rate,
                                         max_tokens=args.max_tokens, api=args.api))
        counts = _window(proc, out)
    return result, counts


def report(results: dict[str, tuple[LoadResult, dict[str, int]]], top: int) -> None:
    """The table of bytecode per chunk, then each configuration's costliest functions
    with their difference from the first configuration's."""
    first = next(iter(results))
    base_result, base_counts = results[first]
    base_per = sum(base_counts.values()) / max(1, base_result.chunks)
    print("| config | chunks | events/read | errors | bytecode per chunk | "
          f"x {first} |\n|---|---|---|---|---|---|")
    for name, (result, counts) in results.items():
        per = sum(counts.values()) / max(1, result.chunks)
        print(f"| {name} | {result.chunks} | {result.events_per_read:.2f} | {result.errors} "
              f"| {per:.0f} | {per / base_per:.2f} |")
    for name, (result, counts) in results.items():
        chunks = max(1, result.chunks)
        base_chunks = max(1, base_result.chunks)
        print(f"\n{name}: the {top} functions that execute the most bytecode per chunk "
              f"(and the difference from {first})")
        for func, n in sorted(counts.items(), key=lambda kv: -kv[1])[:top]:
            diff = n / chunks - base_counts.get(func, 0) / base_chunks
            print(f"  {n / chunks:8.1f}  {diff:+8.1f}  {func}")


def main(argv: list[str] | None = None) -> int:
    parser = counting.parser(__doc__.split("\n\n")[0], KNOWN, configs="parsing,enforce",
                             streams=8, streams_help="concurrent paced streams (default 8; "
                             "the tracer is slow)", rate=50.0)
    args = parser.parse_args(argv)
    names = counting.configurations(parser, args, KNOWN)
    install_uvloop()

    async def run() -> dict[str, tuple[LoadResult, dict[str, int]]]:
        sim = procs.simulator("simulator", args.rate)
        with running([sim], args.logs):
            return {name: await measure(name, sim, args) for name in names}

    results = asyncio.run(run())
    report(results, args.top)
    return 1 if any(r.errors for r, _ in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
