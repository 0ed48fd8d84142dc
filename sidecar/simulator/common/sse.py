"""Server-sent events as the simulated servers frame them. Pure."""

from __future__ import annotations


def sse(name: str, payload: bytes) -> bytes:
    """One named server-sent event."""
    return b"event: " + name.encode() + b"\ndata: " + payload + b"\n\n"
