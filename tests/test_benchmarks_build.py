"""The build each benchmarked sidecar announces (``benchmarks.procs.build_of``), decided on
fake checkouts in a temporary directory: the rule of ``detectors.native``, applied before
the sidecar starts, and a warning when a stale build would make it run pure."""

from __future__ import annotations

import importlib.machinery
import os
import sys
from pathlib import Path

import pytest

from benchmarks.procs import PYTHON, Proc, build_of, free_port
from detectors.native import PURE_ENV

EXT = importlib.machinery.EXTENSION_SUFFIXES[0]


def _checkout(root: Path, *, built: bool, source_newer_by: float = 0.0) -> Path:
    """A fake checkout under ``root``: ``detectors/chain.py`` and, if ``built``, an
    extension beside it that is ``source_newer_by`` seconds older than the source."""
    package = root / "detectors"
    package.mkdir(parents=True)
    source = package / "chain.py"
    source.write_text("", encoding="utf-8")
    os.utime(source, (1_000_000.0, 1_000_000.0))
    if built:
        extension = package / f"chain{EXT}"
        extension.write_bytes(b"")
        when = 1_000_000.0 - source_newer_by
        os.utime(extension, (when, when))
    return root


def _sidecar(name: str, root: Path, env: dict[str, str] | None = None) -> Proc:
    return Proc(name, [], 0, env or {}, cwd=root, sidecar=True)


@pytest.fixture
def unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's environment does not ask for the source."""
    monkeypatch.delenv(PURE_ENV, raising=False)


@pytest.mark.usefixtures("unset")
def test_a_fresh_build_runs_compiled_and_a_checkout_without_one_runs_pure(
        tmp_path: Path) -> None:
    """An extension as new as its source runs (within the installer's slack); none at all
    is the fallback, said but not warned about."""
    fresh = _checkout(tmp_path / "fresh", built=True, source_newer_by=1.0)
    assert build_of(_sidecar("enforce", fresh)) == ("compiled (mypyc)", None)
    bare = _checkout(tmp_path / "bare", built=False)
    assert build_of(_sidecar("enforce", bare)) == ("pure Python (not compiled)", None)


@pytest.mark.usefixtures("unset")
def test_a_stale_build_is_warned_about_unless_the_source_is_meant(tmp_path: Path) -> None:
    """An extension older than its source makes the sidecar run pure: a warning for a
    configuration meant to run compiled, none for ``enforce-pure`` (which sets the
    variable in its own environment)."""
    stale = _checkout(tmp_path, built=True, source_newer_by=60.0)
    build, warning = build_of(_sidecar("enforce", stale))
    assert build.startswith("pure Python (the compiled detectors/chain.py older than")
    assert warning == (
        "enforce is meant to run the compiled build but would run pure Python: 1 compiled "
        f"module is older than its source (detectors/chain.py); pip install -e {stale} "
        "builds it anew")
    build, warning = build_of(_sidecar("enforce-pure", stale, {PURE_ENV: "1"}))
    assert build == f"pure Python ({PURE_ENV} is set)"
    assert warning is None


def test_the_variable_set_around_the_benchmark_is_warned_about(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh build still runs pure when the benchmark's own environment sets the
    variable: a warning for ``enforce``; ``0`` asks for nothing."""
    fresh = _checkout(tmp_path, built=True)
    monkeypatch.setenv(PURE_ENV, "1")
    assert build_of(_sidecar("enforce", fresh)) == (
        f"pure Python ({PURE_ENV} is set)",
        f"enforce is meant to run the compiled build but would run pure Python: {PURE_ENV} "
        "is set in this environment")
    monkeypatch.setenv(PURE_ENV, "0")
    assert build_of(_sidecar("enforce", fresh)) == ("compiled (mypyc)", None)


@pytest.mark.usefixtures("unset")
def test_a_started_sidecar_announces_its_build_on_stderr(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``Proc.start`` of a sidecar prints its build, and the warning, one line each, on
    stderr (stdout keeps the tables), and keeps the build for the JSON record."""
    stale = _checkout(tmp_path / "checkout", built=True, source_newer_by=60.0)
    port = free_port()
    # Any server will do: the build is decided from the checkout, not from the process.
    proc = _sidecar("enforce", stale)
    proc.cmd = [PYTHON, "-m", "http.server", "--bind", "127.0.0.1", str(port)]
    proc.port = port
    logs = tmp_path / "logs"
    logs.mkdir()
    try:
        proc.start(logs, timeout=30)
    finally:
        proc.stop()
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert lines[0] == f"build: enforce runs {proc.build}"
    assert proc.build.startswith("pure Python (the compiled detectors/chain.py older")
    assert lines[1].startswith("WARNING: enforce is meant to run the compiled build")
    assert len(lines) == 2


def test_a_process_that_is_no_sidecar_announces_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Floors and the simulator have no build to announce."""
    port = free_port()
    proc = Proc("parsing", [sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                            str(port)], port, cwd=tmp_path)
    try:
        proc.start(tmp_path, timeout=30)
    finally:
        proc.stop()
    assert capsys.readouterr().err == ""
    assert proc.build == ""
