"""Run ``python -m MODULE ARGS`` while counting the Python bytecode it executes.

    python benchmarks/traced.py OUT.json MODULE [ARGS...]

Every bytecode instruction executed by Python code is counted against its function, as
``"path:qualname"`` (the path cut after ``site-packages/``, or relative to the working
directory); C code (orjson, uvloop, the kernel) executes none and is not counted. Each
SIGUSR2 writes the counts since the previous one (or since start) to ``OUT.json`` and
starts again from zero, so a driver can drop a warm-up and keep a measured window.

Run it as a script path, not with ``-m``: the working directory may be another checkout
(``benchmarks.opcodes --baseline``) that has no copy of this file. The module is imported
from the working directory first, as ``python -m`` would.
"""

from __future__ import annotations

import collections
import os
import runpy
import signal
import sys
import threading
from types import FrameType
from typing import Any

import orjson


def main() -> None:
    if len(sys.argv) < 3:
        raise SystemExit("usage: traced.py OUT.json MODULE [ARGS...]")
    out, module = sys.argv[1], sys.argv[2]
    sys.argv = [module, *sys.argv[3:]]
    cwd = os.getcwd()
    sys.path[0] = cwd
    counts: collections.Counter[str] = collections.Counter()
    names: dict[Any, str] = {}  # code object -> its label, computed once

    def label(code: Any) -> str:
        name = names.get(code)
        if name is None:
            path = code.co_filename
            path = path.split("site-packages/")[-1].removeprefix(cwd + "/")
            name = names[code] = f"{path}:{code.co_qualname}"
        return name

    def trace(frame: FrameType, event: str, _arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            counts[label(frame.f_code)] += 1
        return trace

    def dump(_signum: int, _frame: Any) -> None:
        # orjson and a bare write: next to nothing of this lands in the next window.
        data = orjson.dumps(counts)
        counts.clear()
        tmp = out + ".tmp"
        with open(tmp, "wb") as f:  # a bare write: pathlib would add bytecode to the count
            f.write(data)
        os.replace(tmp, out)

    signal.signal(signal.SIGUSR2, dump)
    sys.settrace(trace)
    # Threads the server starts count too (the trace recorder's writer, an executor).
    threading.settrace(trace)
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
