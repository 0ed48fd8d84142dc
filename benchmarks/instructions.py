"""Machine instructions per chunk: what each proxy executes per SSE event, counted by callgrind.

Run from the repository root (needs valgrind)::

    .venv/bin/python -m benchmarks.instructions [--configs parsing-lean,enforce,enforce-pure]
        [--api chat|messages|responses] [--streams 4] [--rate 20] [--duration 8]
        [--baseline DIR] [--top 12]

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


def _total(dump: Path) -> int:
    """The instructions (``Ir``) a callgrind dump holds."""
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {dump}")


def _top(dump: Path, total: int, top: int) -> list[tuple[int, str]]:
    """The ``top`` functions by their own instructions, from ``callgrind_annotate`` (the
    rows near the total are the call chain's roots, counted with their callees)."""
    text = subprocess.run(["callgrind_annotate", "--threshold=100", "--auto=no", str(dump)],
                          check=True, capture_output=True, text=True, timeout=120).stdout
    rows = []
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+(\S+)", line)
        if m and m.group(2) != "PROGRAM":
            n = int(m.group(1).replace(",", ""))
            if n < 0.99 * total:
                rows.append((n, m.group(2).rpartition(":")[2]))
    return rows[:top]


async def measure(name: str, sim: Proc, args: argparse.Namespace,
                  outdir: Path) -> tuple[LoadResult, int, list[tuple[int, str]]]:
    """One configuration: warm up, count a paced load; the load, instructions, top."""
    proc = _setup(sim, [name], None, args.baseline)[0]
    out = outdir / f"{name}.callgrind"
    proc.cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                "--dump-instr=no", *proc.cmd]
    args.logs.mkdir(parents=True, exist_ok=True)
    proc.start(args.logs, timeout=_START)
    try:
        await run_load(LoadSpec(proc.url, args.streams, 3.0, args.rate,
                                max_tokens=args.max_tokens, api=args.api))
        subprocess.run(["callgrind_control", "--zero", str(proc.pid)], check=True,  # noqa: ASYNC221 (between loads)
                       capture_output=True, timeout=120)
        result = await run_load(LoadSpec(proc.url, args.streams, args.duration, args.rate,
                                         max_tokens=args.max_tokens, api=args.api))
        dump = _dump(proc, out)
        total = _total(dump)
        return result, total, _top(dump, total, args.top)
    finally:
        proc.stop()


def main(argv: list[str] | None = None) -> int:
    parser = counting.parser(__doc__.split("\n\n")[0], KNOWN,
                             configs="parsing-lean,enforce,enforce-pure", streams=4,
                             streams_help="paced streams (default 4)", rate=20.0)
    args = parser.parse_args(argv)
    names = counting.configurations(parser, args, KNOWN)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        parser.error("needs valgrind (Debian: apt-get install valgrind)")
    install_uvloop()
    outdir = Path(tempfile.mkdtemp(prefix="bench-callgrind-"))

    async def run() -> dict[str, tuple[LoadResult, int, list[tuple[int, str]]]]:
        sim = procs.simulator("simulator", args.rate)
        with running([sim], args.logs):
            return {name: await measure(name, sim, args, outdir) for name in names}

    results = asyncio.run(run())
    first = names[0]
    base = results[first][1] / max(1, results[first][0].chunks)
    print(f"| config | chunks | events/read | errors | instructions per chunk | x {first} |\n"
          "|---|---|---|---|---|---|")
    for name, (result, total, _) in results.items():
        per = total / max(1, result.chunks)
        print(f"| {name} | {result.chunks} | {result.events_per_read:.2f} | {result.errors} "
              f"| {per:,.0f} | {per / base:.2f} |")
    for name, (result, _, rows) in results.items():
        print(f"\n{name}: the {args.top} functions that execute the most instructions per chunk")
        for n, func in rows:
            print(f"  {n / max(1, result.chunks):10,.0f}  {func[:110]}")
    return 1 if any(r.errors for r, _, _ in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
