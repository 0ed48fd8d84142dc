"""The configurations ``benchmarks.run`` sets up by name: every documented one, ``NAME-pure``
for any sidecar configuration, and a clear refusal of a name it does not know (which was
skipped without a word, so a mistyped configuration measured nothing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import procs
from benchmarks.run import FLOORS, NO_TEXT, PURE, SIDECARS, _proxy, config_error
from detectors.native import PURE_ENV

_UPSTREAM = procs.Proc("simulator", [], 8000)


@pytest.mark.parametrize("name", ["direct", *FLOORS, *SIDECARS,
                                  *(name + PURE for name in SIDECARS)])
def test_every_documented_configuration_is_known(name: str) -> None:
    assert config_error(name, baseline=False, litellm=False) is None


def test_a_pure_configuration_is_its_sidecar_on_the_fallback() -> None:
    proc = _proxy(_UPSTREAM, "enforce-notext-pure", None, None)
    plain = _proxy(_UPSTREAM, "enforce-notext", None, None)
    assert proc is not None
    assert plain is not None
    assert proc.name == "enforce-notext-pure"
    assert proc.sidecar
    assert proc.env == {PURE_ENV: "1"}
    assert plain.env == {}
    # The same command apart from its ports: enforce mode, the text detectors off.
    assert proc.cmd[proc.cmd.index("--mode") + 1] == "enforce"
    assert tuple(proc.cmd[-len(NO_TEXT):]) == NO_TEXT


def test_a_base_configuration_is_its_sidecar_from_the_baseline(tmp_path: Path) -> None:
    """``NAME-base`` runs configuration ``NAME`` from the baseline checkout: the mode and
    options of ``NAME`` (``enforce-notext-base`` was started as ``--mode enforce-notext``,
    which the sidecar refuses)."""
    proc = _proxy(_UPSTREAM, "enforce-notext-base", None, tmp_path)
    assert proc is not None
    assert proc.name == "enforce-notext-base"
    assert proc.cwd == tmp_path
    assert proc.env == {}
    assert proc.cmd[proc.cmd.index("--mode") + 1] == "enforce"
    assert tuple(proc.cmd[-len(NO_TEXT):]) == NO_TEXT


@pytest.mark.parametrize(("name", "baseline", "litellm", "says"), [
    ("enforce-notxt", False, False, "unknown configuration 'enforce-notxt'"),
    ("parsing-pure", False, False, "-pure takes a sidecar configuration"),
    ("direct-pure", False, False, "-pure takes a sidecar configuration"),
    ("enforce-base", False, False, "enforce-base needs --baseline"),
    ("parsing-base", True, False, "-base takes a sidecar configuration"),
    ("litellm", False, False, "litellm needs --litellm"),
])
def test_a_configuration_that_cannot_be_set_up_is_refused(
        name: str, baseline: bool, litellm: bool, says: str) -> None:
    error = config_error(name, baseline=baseline, litellm=litellm)
    assert error is not None
    assert says in error
    if not baseline and not litellm:
        with pytest.raises(ValueError, match="configuration"):
            _proxy(_UPSTREAM, name, None, None)


def test_the_command_line_refuses_an_unknown_configuration_before_starting_anything(
        tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "paced", "--configs", "parsing,enforc",
         "--logs", str(tmp_path)],
        cwd=procs.ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "unknown configuration 'enforc'" in done.stderr
    assert not any(tmp_path.iterdir())  # no process was started, so no log was written
