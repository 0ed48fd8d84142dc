"""The house rule on module size: no module of the sidecar or the detectors is longer than
450 lines, so each reads as one role (issue 37's target, kept by this test)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 450


def test_no_module_is_longer_than_450_lines() -> None:
    """Every ``.py`` file under ``sidecar/`` (the simulator included) and ``detectors/``."""
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines())
        for package in ("sidecar", "detectors")
        for path in (ROOT / package).rglob("*.py")
    }
    assert len(sizes) > 50  # the packages were found
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
