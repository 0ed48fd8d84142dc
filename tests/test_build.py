"""The compiled build (mypyc, ``setup.py``) and the pure-Python source give the same results.

Each comparison runs ``tests/build_verdicts.py`` in two processes over the same traces, one
on the compiled modules and one with ``RUNAWAY_SIDECAR_PURE=1`` (every module from its
source), and compares what they found record by record. Where nothing was compiled (a
machine without a C compiler installs the source alone) there is nothing to compare and
the comparisons are skipped; ``.ci/run`` checks that its install compiled, so CI never
compares the source with itself.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import inspect
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import detectors
import sidecar
from detectors.native import PURE_ENV, Choice, choose, compiled, describe

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "tests" / "data" / "traces"
#: The loops and the ambiguous traces (the README's test command: about 30 s of CPU); the
#: healthy ones, 1,885 more records, with the slow tests (``.ci/run``).
HARD = ["loops.jsonl", "ambiguous.jsonl"]
HEALTHY = ["healthy.jsonl", "added-healthy.jsonl", "added-ambiguous.jsonl"]


def _run_both(tmp_path: Path, files: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``build_verdicts`` of ``files`` on the compiled build and on the source, side by
    side (the machine has two cores)."""
    env = {k: v for k, v in os.environ.items() if k != PURE_ENV}
    procs = []
    for name, extra in (("compiled", {}), ("pure", {PURE_ENV: "1"})):
        out = tmp_path / f"{name}.json"
        cmd = [sys.executable, "-m", "tests.build_verdicts", str(out),
               *(str(TRACES / f) for f in files)]
        procs.append((out, subprocess.Popen(cmd, cwd=ROOT, env={**env, **extra})))
    for _out, proc in procs:
        assert proc.wait(timeout=600) == 0
    compiled_run, pure_run = (json.loads(out.read_text()) for out, _ in procs)
    return compiled_run, pure_run


def _compare(compiled_run: dict[str, Any], pure_run: dict[str, Any]) -> None:
    assert compiled_run["compiled"], compiled_run["build"]
    assert not pure_run["compiled"], pure_run["build"]
    a, b = compiled_run["records"], pure_run["records"]
    assert a.keys() == b.keys()
    differ = [k for k in a if a[k] != b[k]]
    assert not differ, [(k, a[k], b[k]) for k in differ[:5]]
    # The comparison covers verdicts and the findings of every text detector, not empty
    # tables (the lower thresholds reach every one of them on either set of traces).
    assert any(r["chain"] for r in a.values())
    alone = {key.rsplit("/", 1)[1] for r in a.values() for key in r["alone"]}
    assert alone >= {"periodic", "restatement", "recurrence", "sentences"}
    # Chunk invariance in either build: pieces of 61 characters find what single tokens do.
    for record in a.values():
        chain = record["chain"]
        assert record["pieces"] == (None if chain is None else [chain[0], chain[1], chain[3]])


needs_compiled = pytest.mark.skipif(
    not compiled(), reason=f"nothing compiled to compare: {describe()}")


@needs_compiled
def test_compiled_and_pure_agree_on_the_loops_and_ambiguous_traces(tmp_path: Path) -> None:
    """Every loop and ambiguous trace gives the same verdicts, positions and detector
    findings on the compiled build and on the pure-Python source."""
    _compare(*_run_both(tmp_path, HARD))


@needs_compiled
@pytest.mark.slow
def test_compiled_and_pure_agree_on_the_healthy_traces(tmp_path: Path) -> None:
    """The same for every healthy trace, and the ambiguous ones added for issue 28."""
    _compare(*_run_both(tmp_path, HEALTHY))


@needs_compiled
def test_no_class_from_source_extends_a_compiled_one() -> None:
    """setup.py compiles every module whose classes extend a compiled class: an
    interpreted subclass of a compiled class fails when it is instantiated."""
    def is_compiled(module_name: str) -> bool:
        return str(getattr(sys.modules[module_name], "__file__", "")).endswith(".so")

    offenders = []
    for package in (detectors, sidecar):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith("__main__"):  # runs the CLI when imported
                continue
            module = importlib.import_module(info.name)
            if is_compiled(info.name):
                continue
            for _, cls in inspect.getmembers(module, inspect.isclass):
                if cls.__module__ != info.name:
                    continue
                offenders += [(cls.__qualname__, base.__qualname__) for base in cls.__mro__[1:]
                              if base.__module__ in sys.modules and is_compiled(base.__module__)]
    assert is_compiled("detectors.chain")
    assert not offenders


def _touch(path: Path, when: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    os.utime(path, (when, when))


def test_choose_reads_the_build_of_any_checkout(tmp_path: Path) -> None:
    """``choose`` applies the rule to the files under a root: extensions of either package
    found, one older than its source by more than the installer's slack is stale, the
    variable asks for the source whatever the files say."""
    ext = importlib.machinery.EXTENSION_SUFFIXES[0]
    assert choose(tmp_path, {}) == Choice(built=False, stale=(), reason="not compiled")
    _touch(tmp_path / "detectors" / "chain.py", 1000.0)
    _touch(tmp_path / "detectors" / f"chain{ext}", 999.0)  # within the slack
    _touch(tmp_path / "sidecar" / "codecs" / "sse.py", 1000.0)
    _touch(tmp_path / "sidecar" / "codecs" / f"sse{ext}", 1001.0)
    _touch(tmp_path / "sidecar" / "orphan" / f"gone{ext}", 1.0)  # no source: not counted
    assert choose(tmp_path, {PURE_ENV: "0"}) == Choice(built=True, stale=(), reason="")
    assert choose(tmp_path, {PURE_ENV: "1"}).reason == f"{PURE_ENV} is set"
    _touch(tmp_path / "sidecar" / "codecs" / "sse.py", 1010.0)
    stale = choose(tmp_path, {})
    assert stale.built
    assert stale.stale == ("sidecar/codecs/sse.py",)
    assert stale.reason == ("the compiled sidecar/codecs/sse.py older than the source: "
                            "pip install -e . builds it anew")
    # A module written in C is stale when its C source is newer, though its .py is not.
    _touch(tmp_path / "detectors" / "shinglecount.py", 1000.0)
    _touch(tmp_path / "detectors" / f"shinglecount{ext}", 1001.0)
    _touch(tmp_path / "detectors" / "shinglecount.c", 1000.0)
    assert choose(tmp_path, {}).stale == ("sidecar/codecs/sse.py",)
    _touch(tmp_path / "detectors" / "shinglecount.c", 1010.0)
    assert choose(tmp_path, {}).stale == ("detectors/shinglecount.py", "sidecar/codecs/sse.py")


def test_this_process_ran_the_build_choose_finds() -> None:
    """``select`` decided this process's build by ``choose`` on this checkout."""
    assert (choose(ROOT, os.environ).reason == "") == compiled()
