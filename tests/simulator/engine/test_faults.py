"""Reading the fault headers."""

from __future__ import annotations

import pytest

from sidecar.simulator.engine.faults import Fault, FaultHeaderError, FaultKind, parse_fault


def test_fault_headers() -> None:
    """Fault names, counts and delays are read from headers, and bad ones are refused."""
    assert parse_fault({}) is None
    assert parse_fault({"X-Sim-Fault": "no-done"}) == Fault(FaultKind.NO_DONE)
    got = parse_fault({"X-Sim-Fault": "reset-mid-stream", "X-Sim-Fault-After": "2"})
    assert got == Fault(FaultKind.RESET_MID_STREAM, after=2, after_given=True)
    assert parse_fault({"X-Sim-Fault": "slow-first-token", "X-Sim-Fault-Delay": "0.5"}) == Fault(
        FaultKind.SLOW_FIRST_TOKEN, delay=0.5
    )
    for bad in (
        {"X-Sim-Fault": "boom"},
        {"X-Sim-Fault": "no-done", "X-Sim-Fault-After": "x"},
        {"X-Sim-Fault": "no-done", "X-Sim-Fault-After": "-1"},
        {"X-Sim-Fault": "slow-first-token", "X-Sim-Fault-Delay": "nan"},
    ):
        with pytest.raises(FaultHeaderError):
            parse_fault(bad)
