"""Server-sent events as the simulated servers frame them. Pure."""

from __future__ import annotations

#: The end-of-stream marker of OpenAI-style streams.
DONE = b"data: [DONE]\n\n"


def sse(name: str, payload: bytes) -> bytes:
    """One named server-sent event."""
    return b"event: " + name.encode() + b"\ndata: " + payload + b"\n\n"


def data_event(payload: bytes) -> bytes:
    """One unnamed event (``data: …`` and a blank line), as OpenAI-style streams send."""
    return b"data: " + payload + b"\n\n"
