"""Which config changes a SIGHUP reload may apply (pure)."""

from __future__ import annotations

import dataclasses

import pytest

from sidecar.config import Config
from sidecar.service.server import RESTART_ONLY, restart_needed


def test_thresholds_and_modes_reload() -> None:
    """Modes, detector settings and the ladder change by reload."""
    cfg = Config()
    new = dataclasses.replace(cfg, mode="shadow", detectors=dataclasses.replace(
        cfg.detectors, stall_seconds=9.0))
    assert restart_needed(cfg, new) == ""


@pytest.mark.parametrize(("key", "value"), [
    ("api_key", "rotated"), ("upstream_connect_timeout_seconds", 2.0),
    ("upstream_read_timeout_seconds", 30.0), ("client_header_timeout_seconds", 5.0),
    ("max_header_bytes", 4096), ("upstream", "http://127.0.0.1:9"),
])
def test_options_read_at_start_need_a_restart(key: str, value: object) -> None:
    """An option the process reads only when it starts is refused by a reload, naming the
    key, instead of being accepted and silently not applied."""
    cfg = Config()
    assert key in RESTART_ONLY
    assert restart_needed(cfg, dataclasses.replace(cfg, **{key: value})) == (
        f"key '{key}': changing it needs a restart")
