"""Machine instructions per chunk: what each proxy executes per SSE event, counted by callgrind.

Run from the repository root (needs valgrind)::

    .venv/bin/python -m benchmarks.instructions [--configs parsing-lean,enforce,enforce-pure]
        [--api chat|messages|responses] [--streams 4] [--rate 20] [--duration 8]
        [--baseline DIR] [--top 12] [--cache KIB] [--warmup SECONDS]

``benchmarks.opcodes`` counts Python bytecode, which compiled code does not execute: the
compiled build (mypyc) would look free there. This counts every machine instruction of
the process in user space (the interpreter's, the extensions', libc's; not the kernel's),
so it compares the compiled build, the pure-Python fallback and the floor alike. Each
proxy runs under ``valgrind --tool=callgrind``; after a warm-up load,
``callgrind_control --zero`` starts the count, a paced load runs, and ``callgrind_control
--dump`` takes it; the count is divided by the chunks the clients received. The count is
nearly the same from run to run (the event loop's idle turns and the timers move it a
little), where CPU time on this shared machine moves 10 to 20 %.

Callgrind makes a proxy 50 to 100 times slower, so the load is small (4 streams at 20
tokens per second); each read is still one event, as at 256 x 50 untraced (the table shows
events per read). The top functions are callgrind's, by symbol: the interpreter's loop
(``_PyEval_EvalFrameDefault``) for Python code, ``CPyDef_*`` for compiled functions.

``--cache KIB`` also simulates the CPU caches (``--cache-sim=yes``: 32 KiB first-level
caches for code and data, and a last-level cache of KIB KiB, 16-way, 64-byte lines) and
reports the reads of data and code that miss the last level, per chunk; the functions
are then listed by their data misses. At 256 streams an event finds its stream's objects
out of the caches: 255 other streams ran since. Instructions count the work; these
misses count what that work fetched from further away, and a proxy can execute fewer
instructions than another and still take more time. To see that, run many slow streams
(``--streams 128 --rate 1 --warmup 15``: every stream's objects are touched once per
round, as at 256 x 50) against a last level the size of one core's (``--cache 1024`` on
this machine's 1 MiB L2). The simulation makes the proxy slower still; the warm-up must
outlast the start of every stream.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import counting, procs
from benchmarks.loadgen import LoadResult, LoadSpec, install_uvloop, run_load
from benchmarks.procs import Proc, running
from benchmarks.run import _setup

KNOWN = ("passthrough", "parsing", "parsing-lean", "off", "shadow", "enforce", "enforce-notext",
         "enforce-pure", "enforce-base", "shadow-base")
#: Seconds a proxy under callgrind may take to start listening (imports run 50x slower).
_START = 240.0


def _dump(proc: Proc, out: Path) -> Path:
    """Ask callgrind in ``proc`` for its counts since the last zero; the file written."""
    before = set(out.parent.glob(out.name + "*"))
    subprocess.run(["callgrind_control", "--dump", str(proc.pid)], check=True,
                   capture_output=True, timeout=120)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        new = set(out.parent.glob(out.name + "*")) - before
        if new:
            time.sleep(0.5)  # let callgrind finish writing it
            return max(new, key=lambda p: p.stat().st_mtime)
        time.sleep(0.2)
    raise RuntimeError(f"{proc.name}: callgrind wrote no dump")


#: What ``--cache`` reports per chunk, by callgrind's event names: reads of data, writes
#: of data and fetches of code that miss the simulated last-level cache.
MISSES = {"DLmr": "LL data read misses", "DLmw": "LL data write misses",
          "ILmr": "LL code misses"}


def totals(text: str) -> dict[str, int]:
    """The counts of a callgrind dump's text, by event name (``Ir``: instructions; with a
    cache simulation also ``DLmr`` and the other misses): its ``events:`` line names the
    columns of its ``summary:`` (or ``totals:``) line. Raises ``ValueError`` when the text
    holds neither."""
    names: list[str] = []
    for line in text.splitlines():
        if line.startswith("events:"):
            names = line.split()[1:]
        elif line.startswith(("summary:", "totals:")) and names:
            return dict(zip(names, (int(v) for v in line.split()[1:]), strict=True))
    raise ValueError("no events and summary lines in the callgrind dump")


def _top(dump: Path, total: int, top: int, event: str = "Ir") -> list[tuple[int, str]]:
    """The ``top`` functions by their own count of ``event`` (instructions by default),
    from ``callgrind_annotate`` (the rows near the total are the call chain's roots,
    counted with their callees)."""
    text = subprocess.run(["callgrind_annotate", "--threshold=100", "--auto=no",
                           f"--sort={event}", f"--show={event}", str(dump)],
                          check=True, capture_output=True, text=True, timeout=120).stdout
    rows = []
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+(\S+)", line)
        if m and m.group(2) != "PROGRAM":
            n = int(m.group(1).replace(",", ""))
            if n < 0.99 * total:
                rows.append((n, m.group(2).rpartition(":")[2]))
    return rows[:top]


def cache_options(kib: int) -> list[str]:
    """callgrind's options for ``--cache KIB`` (see the module docstring)."""
    return ["--cache-sim=yes", "--I1=32768,8,64", "--D1=32768,8,64", f"--LL={kib * 1024},16,64"]


async def measure(name: str, sim: Proc, args: argparse.Namespace,
                  outdir: Path) -> tuple[LoadResult, dict[str, int], list[tuple[int, str]]]:
    """One configuration: warm up, count a paced load; the load, the counts, the top."""
    proc = _setup(sim, [name], None, args.baseline)[0]
    out = outdir / f"{name}.callgrind"
    proc.cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                "--dump-instr=no", *(cache_options(args.cache) if args.cache else []),
                *proc.cmd]
    args.logs.mkdir(parents=True, exist_ok=True)
    proc.start(args.logs, timeout=_START)
    try:
        await run_load(LoadSpec(proc.url, args.streams, args.warmup, args.rate,
                                max_tokens=args.max_tokens, api=args.api))
        subprocess.run(["callgrind_control", "--zero", str(proc.pid)], check=True,  # noqa: ASYNC221 (between loads)
                       capture_output=True, timeout=120)
        result = await run_load(LoadSpec(proc.url, args.streams, args.duration, args.rate,
                                         max_tokens=args.max_tokens, api=args.api))
        dump = _dump(proc, out)
        counts = totals(dump.read_text(errors="replace"))
        event = "DLmr" if args.cache else "Ir"
        return result, counts, _top(dump, counts[event], args.top, event)
    finally:
        proc.stop()


def table(results: dict[str, tuple[LoadResult, dict[str, int]]], cache: bool) -> list[str]:
    """The markdown table of ``results`` (each configuration's load and counts), per chunk
    and as a ratio to the first configuration's; with ``cache``, the misses too."""
    first = next(iter(results))
    result, counts = results[first]
    base = counts["Ir"] / max(1, result.chunks)
    extra = list(MISSES) if cache else []
    lines = ["| config | chunks | events/read | errors | instructions per chunk | x " + first
             + " |" + "".join(f" {MISSES[e]} per chunk |" for e in extra),
             "|---|---|---|---|---|---|" + "---|" * len(extra)]
    for name, (result, counts) in results.items():
        chunks = max(1, result.chunks)
        per = counts["Ir"] / chunks
        lines.append(f"| {name} | {result.chunks} | {result.events_per_read:.2f} "
                     f"| {result.errors} | {per:,.0f} | {per / base:.2f} |"
                     + "".join(f" {counts[e] / chunks:,.1f} |" for e in extra))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = counting.parser(__doc__.split("\n\n")[0], KNOWN,
                             configs="parsing-lean,enforce,enforce-pure", streams=4,
                             streams_help="paced streams (default 4)", rate=20.0)
    parser.add_argument("--cache", type=counting.count, metavar="KIB",
                        help="simulate the caches, with a last level of KIB KiB, and report "
                             "its misses per chunk (see the module docstring)")
    parser.add_argument("--warmup", type=counting.positive, default=3.0, metavar="SECONDS",
                        help="seconds of load before the count starts (default 3)")
    args = parser.parse_args(argv)
    names = counting.configurations(parser, args, KNOWN)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        parser.error("needs valgrind (Debian: apt-get install valgrind)")
    install_uvloop()
    outdir = Path(tempfile.mkdtemp(prefix="bench-callgrind-"))

    async def run() -> dict[str, tuple[LoadResult, dict[str, int], list[tuple[int, str]]]]:
        sim = procs.simulator("simulator", args.rate)
        with running([sim], args.logs):
            return {name: await measure(name, sim, args, outdir) for name in names}

    results = asyncio.run(run())
    print("\n".join(table({n: (r, c) for n, (r, c, _) in results.items()}, bool(args.cache))))
    what = "miss the last-level cache on the most data reads" if args.cache else (
        "execute the most instructions")
    for name, (result, _, rows) in results.items():
        print(f"\n{name}: the {args.top} functions that {what} per chunk")
        for n, func in rows:
            print(f"  {n / max(1, result.chunks):10,.{1 if args.cache else 0}f}  {func[:110]}")
    return 1 if any(r.errors for r, _, _ in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
