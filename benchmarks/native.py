"""Where each proxy's CPU goes at paced load, by native code: kernel, interpreter, uvloop.

Run from the repository root (Linux, with ``perf`` on the PATH)::

    .venv/bin/python -m benchmarks.native [--configs parsing,enforce-notext,enforce]
        [-c 256] [--rate 50] [--seconds 10] [--reps 2] [--baseline DIR] [--keep DIR]

Each proxy in turn carries a paced load (``-c`` streams at ``--rate`` tokens per
second, as ``benchmarks.run paced``) while ``perf record -e cpu-clock`` samples it at
2 kHz for ``--seconds`` from the end of the load's ramp (every stream started);
configurations alternate, ``--reps`` times. ``cpu-clock`` is a
software event, so this works in a VM without hardware counters. A sample lands in the
shared object that was running: the kernel (the socket reads and writes), libpython (the
interpreter running bytecode, allocating, switching coroutines), uvloop, libc, and the
C extensions (aiohttp's HTTP parser, orjson).

Why: ``benchmarks.opcodes`` counts bytecode and ``paced`` measures CPU time, but neither
says whether a proxy's extra CPU is bytecode, C code it calls, or system calls. The table
prints samples per 1,000 chunks delivered, so configurations compare directly, and the
ratio of each one's total to the first configuration's. Sampling costs the proxy a few
per cent; the ratios are for comparing the proxies, not for the targets.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import tempfile
from collections import defaultdict
from pathlib import Path

from benchmarks import procs
from benchmarks.loadgen import LoadSpec, install_uvloop, run_load
from benchmarks.procs import running
from benchmarks.run import _setup

#: Shared objects shown by name; the rest are summed as "other C".
_GROUPS = {
    "[kernel.kallsyms]": "kernel",
    "libpython": "interpreter",
    "loop.cpython": "uvloop",
    "libc.so": "libc",
}


def _group(dso: str) -> str:
    for key, name in _GROUPS.items():
        if key in dso:
            return name
    return "other C"


def group_samples(report: str) -> dict[str, int]:
    """Samples per group of shared objects, from the text of ``perf report --sort dso -n
    -q --stdio`` (lines of: share, samples, shared object)."""
    groups: dict[str, int] = defaultdict(int)
    for line in report.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0].endswith("%") and parts[1].isdigit():
            groups[_group(" ".join(parts[2:]))] += int(parts[1])
    return dict(groups)


def samples_by_group(data: Path) -> dict[str, int]:
    """Samples in a ``perf.data`` file, summed per group of shared objects."""
    return group_samples(subprocess.run(
        ["perf", "report", "-i", str(data), "--no-children", "--sort", "dso", "-g", "none",
         "-n", "-q", "--stdio"], capture_output=True, text=True, check=True).stdout)


async def _profile(args: argparse.Namespace, keep: Path) -> dict[str, list[dict[str, float]]]:
    names = args.configs.split(",")
    sim = procs.simulator("simulator", args.rate)
    rows: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    with running([sim], keep):
        proxies = _setup(sim, names, None, args.baseline)
        with running(proxies, keep):
            for proxy in proxies:  # warm every path before sampling
                await run_load(LoadSpec(proxy.url, 4, 1.0, args.rate, max_tokens=20, ramp=0))
            for rep in range(args.reps):
                for proxy in proxies:
                    data = keep / f"perf-{proxy.name}-{rep}.data"
                    # The load starts first, then perf samples a window inside it from
                    # the end of its ramp (every stream started); the load runs on for
                    # up to three seconds after the window.
                    ramped = asyncio.Event()
                    load = asyncio.create_task(run_load(LoadSpec(
                        proxy.url, args.concurrency, args.seconds + 4.0, args.rate,
                        max_tokens=args.max_tokens), ramped))
                    await ramped.wait()
                    rec = await asyncio.create_subprocess_exec(
                        "perf", "record", "-q", "-e", "cpu-clock", "-F", "2000",
                        "-p", str(proxy.pid), "-o", str(data), "--", "sleep", str(args.seconds),
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    await rec.wait()
                    result = await load
                    if rec.returncode != 0:
                        raise SystemExit(f"perf record failed for {proxy.name} "
                                         f"(exit {rec.returncode}): is perf allowed here?")
                    chunks = result.chunks_per_s * args.seconds
                    groups = samples_by_group(data)
                    row = {g: n * 1000.0 / chunks for g, n in groups.items()}
                    row["all"] = sum(groups.values()) * 1000.0 / chunks
                    row["events_per_read"] = result.events_per_read
                    rows[proxy.name].append(row)
                    print(f"rep {rep} {proxy.name}: {result.chunks_per_s:.0f} chunks/s, "
                          f"{sum(groups.values())} samples", flush=True)
    return rows


def _print(rows: dict[str, list[dict[str, float]]]) -> None:
    cols = ["all", "kernel", "interpreter", "uvloop", "libc", "other C"]

    def med(runs: list[dict[str, float]], key: str) -> float:
        return statistics.median(r.get(key, 0.0) for r in runs)

    first = next(iter(rows.values()))
    print("\nsamples per 1,000 chunks (2 kHz cpu-clock; medians over repetitions)")
    print("| config | " + " | ".join(cols) + " | x first (all) | events/read |")
    print("|---|" + "---|" * (len(cols) + 2))
    for name, runs in rows.items():
        ratio = statistics.median(r["all"] / f["all"] for r, f in zip(runs, first, strict=True))
        cells = [f"{med(runs, c):.1f}" for c in cols]
        print(f"| {name} | " + " | ".join(cells) +
              f" | {ratio:.2f} | {med(runs, 'events_per_read'):.2f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default="parsing,enforce-notext,enforce",
                        help="proxies to sample, as in benchmarks.run (the first is the "
                             "reference of the ratio column)")
    parser.add_argument("-c", "--concurrency", type=int, default=256)
    parser.add_argument("--rate", type=float, default=50.0, help="tokens per second per stream")
    parser.add_argument("--max-tokens", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=10.0, help="sampled window per run")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--baseline", type=Path, default=None,
                        help="another checkout, for the *-base configurations")
    parser.add_argument("--keep", type=Path, default=None,
                        help="directory for the perf.data files and logs (default: a temp dir)")
    args = parser.parse_args(argv)
    keep = args.keep or Path(tempfile.mkdtemp(prefix="bench-native-"))
    keep.mkdir(parents=True, exist_ok=True)
    install_uvloop()
    rows = asyncio.run(_profile(args, keep))
    _print(rows)
    print(f"\nperf data: {keep} (perf report -i FILE --sort dso,sym)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
