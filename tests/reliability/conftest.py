"""Reliability fixtures: the simulator-backed stack factory of the proxy tests."""

from tests.sidecar.conftest import make_stack

__all__ = ["make_stack"]
