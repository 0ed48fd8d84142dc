"""Detector microbenchmark: ns per token of the default chain and peak memory per stream.

Run from the repository root: ``.venv/bin/python -m benchmarks.detectors [--reps 5]``
(as a module: run as a script, this file would shadow the ``detectors`` package)

Inputs are built from tests/data/traces by concatenation, then cut at 100,000 pseudo-tokens:

- *loop*: the reasoning of every ``confidence: high`` loop trace, in file order.
- *healthy*: the reasoning of healthy traces, in file order.

Each is split with :func:`detectors.tokenize.split_deltas` (one token per delta) before
timing, and fed with ``tokens=1`` exactly like the proxy. The default chain latches after
its first verdict (later deltas return at once), so the loop input is also timed with every
text detector kept running to the end (thresholds out of reach) as the worst case.
Peak memory is measured with tracemalloc around building the chain and feeding the stream
(the pre-split input is allocated before tracing starts).

``--by-detector`` instead feeds the healthy input with a CPU clock read around every text
detector's ``analyze`` (each block, each detector) and prints each one's CPU in ns per
token of the whole input, ``--reps`` times (the two reads add some ns to each figure).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import tracemalloc
from pathlib import Path

from detectors import DetectorConfig, default_chain
from detectors.analyzer import BlockAnalyzer, Finding
from detectors.blocks import Block
from detectors.replay import split_stream
from detectors.tokenize import split_deltas

TRACES = Path(__file__).resolve().parent.parent / "tests" / "data" / "traces"
TOKENS = 100_000

NEVER_FIRE = DetectorConfig(
    recurrence_threshold=2.0,
    recurrence_evidence=1e9,
    periodic_min_repeats=10**9,
    salad_run_tokens=10**9,
    symbol_run_tokens=10**9,
    script_mix=99,
    restatement_copies=10**9,
    sentences_repeat_chars=10**9,
    periodic_copy_chars=0,
    stall_seconds=None,
)


def build(name: str, keep: object) -> list[str]:
    """Concatenate the reasoning of matching traces until TOKENS deltas."""
    deltas: list[str] = []
    with (TRACES / f"{name}.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            record = json.loads(line)
            if keep is not None and record.get("confidence") != keep:
                continue
            start, end, _ = split_stream(record["text"])
            deltas.extend(split_deltas(record["text"][start:end] + "\n\n"))
            if len(deltas) >= TOKENS:
                return deltas[:TOKENS]
    while len(deltas) < TOKENS:  # not enough text: wrap around
        deltas.extend(deltas[: TOKENS - len(deltas)])
    return deltas


def run(deltas: list[str], config: DetectorConfig) -> tuple[float, float, str]:
    """Feed all deltas once; return wall seconds, CPU seconds of this process and the
    verdict's detector (or '-'). CPU time is the cost figure on a shared, busy machine."""
    chain = default_chain(config)
    feed = chain.feed
    fired = "-"
    c0 = time.process_time()
    t0 = time.perf_counter()
    for i, d in enumerate(deltas):
        if feed("thinking", d, 1, i * 0.02) is not None:
            fired = chain.verdict.detector if chain.verdict else "?"
    return time.perf_counter() - t0, time.process_time() - c0, fired


def peak_memory(deltas: list[str], config: DetectorConfig) -> int:
    """Peak bytes allocated while building one chain and feeding the stream."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    chain = default_chain(config)
    for i, d in enumerate(deltas):
        chain.feed("thinking", d, 1, i * 0.02)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak


class _Timed:
    """An analyzer with a clock read around each ``analyze`` (see ``--by-detector``)."""

    def __init__(self, analyzer: BlockAnalyzer, spent: dict[str, float], name: str) -> None:
        self.analyzer, self.spent, self.name = analyzer, spent, name

    def analyze(self, block: Block) -> Finding | None:
        t0 = time.process_time()
        found = self.analyzer.analyze(block)
        self.spent[self.name] = self.spent.get(self.name, 0.0) + time.process_time() - t0
        return found


def by_detector(deltas: list[str], config: DetectorConfig) -> dict[str, float]:
    """ns per token of ``deltas`` spent in each text detector's ``analyze``."""
    spent: dict[str, float] = {}
    chain = default_chain(config)
    analyzers = chain._thinking.analyzers  # a benchmark's look inside the chain
    for i, (name, analyzer) in enumerate(analyzers):
        analyzers[i] = (name, _Timed(analyzer, spent, name))
    for i, d in enumerate(deltas):
        chain.feed("thinking", d, 1, i * 0.02)
    return {name: s / len(deltas) * 1e9 for name, s in spent.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--by-detector", action="store_true",
                        help="time each text detector on the healthy input instead")
    args = parser.parse_args()
    if args.by_detector:
        healthy = build("healthy", None)
        for _ in range(args.reps):
            print("  ".join(f"{name} {ns:.0f}" for name, ns in
                            by_detector(healthy, DetectorConfig()).items()) + " ns/token")
        return
    cases = [
        ("loop (default chain)", build("loops", "high"), DetectorConfig()),
        ("loop (all detectors kept running)", build("loops", "high"), NEVER_FIRE),
        ("healthy (default chain)", build("healthy", None), DetectorConfig()),
    ]
    for name, deltas, config in cases:
        times = []
        cpu = []
        fired = "-"
        for _ in range(args.reps):
            seconds, cpu_seconds, fired = run(deltas, config)
            times.append(seconds)
            cpu.append(cpu_seconds)
        ns = statistics.median(times) / len(deltas) * 1e9
        cpu_ns = statistics.median(cpu) / len(deltas) * 1e9
        chars = sum(map(len, deltas))
        peak = peak_memory(deltas, config)
        print(
            f"{name:<36} {len(deltas)} tokens {chars} chars  median {ns:7.0f} ns/token "
            f"(min {min(times) / len(deltas) * 1e9:.0f}, cpu median {cpu_ns:.0f}, "
            f"{args.reps} reps)  "
            f"peak {peak / 1024:.1f} KiB/stream  verdict: {fired}"
        )


if __name__ == "__main__":
    main()
