"""Fault injection of the simulated node, chosen per request by headers. Pure parsing.

``X-Sim-Fault`` names the fault; ``X-Sim-Fault-After`` (token chunks, default 5) says when a
mid-stream fault strikes; ``X-Sim-Fault-Delay`` (seconds, default 5) sets the first-token
delay of ``slow-first-token``.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass

FAULT_HEADER = "X-Sim-Fault"
AFTER_HEADER = "X-Sim-Fault-After"
DELAY_HEADER = "X-Sim-Fault-Delay"
DEFAULT_AFTER = 5
DEFAULT_DELAY = 5.0
#: What ``invalid-sse`` sends after a 200: a cut chunk, an HTML page, bytes that are not
#: UTF-8, and an event that is not JSON.
INVALID_SSE = (
    b'data: {"id":"chatcmpl-garbage","object":"chat.completion.chunk","choices":[{"ind\n\n'
    b"<html><body>502 Bad Gateway</body></html>\n"
    b"\xff\xfe\x00not an event stream\r\n\r\n"
    b"data: {not json at all}\n\n"
)


class FaultKind(enum.Enum):
    """The injectable faults and what the client sees."""

    RESET_BEFORE_HEADERS = "reset-before-headers"  # socket closed, no status line
    RESET_MID_STREAM = "reset-mid-stream"  # transport aborted after N token chunks
    STALL_MID_STREAM = "stall-mid-stream"  # silence after N token chunks, socket open
    HTTP_500 = "http-500"  # vLLM-style 500 JSON error body
    INVALID_SSE = "invalid-sse"  # 200, then bytes that are neither SSE nor JSON
    NO_DONE = "no-done"  # the stream ends without data: [DONE]
    ERROR_MID_STREAM = "error-mid-stream"  # data: {"error":…500} then data: [DONE]
    SLOW_FIRST_TOKEN = "slow-first-token"  # noqa: S105 - headers, then a delay before the first chunk


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault to inject into one request.

    ``after`` is the number of token chunks sent before a mid-stream fault; ``after_given``
    tells ``no-done`` to cut the stream there instead of running it to the end.
    """

    kind: FaultKind
    after: int = DEFAULT_AFTER
    delay: float = DEFAULT_DELAY
    after_given: bool = False


class FaultHeaderError(ValueError):
    """A fault header that cannot be understood."""


def parse_fault(headers: Mapping[str, str]) -> Fault | None:
    """Read the fault headers (case-insensitive mapping); ``None`` when no fault is asked."""
    name = headers.get(FAULT_HEADER)
    if name is None or name.strip() == "":
        return None
    try:
        kind = FaultKind(name.strip().lower())
    except ValueError:
        known = ", ".join(k.value for k in FaultKind)
        raise FaultHeaderError(f"unknown {FAULT_HEADER} {name!r}; known: {known}") from None
    after_raw = headers.get(AFTER_HEADER)
    after = DEFAULT_AFTER
    if after_raw is not None:
        try:
            after = int(after_raw)
        except ValueError:
            raise FaultHeaderError(f"{AFTER_HEADER} must be an integer") from None
        if after < 0:
            raise FaultHeaderError(f"{AFTER_HEADER} must be >= 0")
    delay = DEFAULT_DELAY
    delay_raw = headers.get(DELAY_HEADER)
    if delay_raw is not None:
        try:
            delay = float(delay_raw)
        except ValueError:
            raise FaultHeaderError(f"{DELAY_HEADER} must be a number") from None
        if not math.isfinite(delay) or delay < 0:
            raise FaultHeaderError(f"{DELAY_HEADER} must be a finite number >= 0")
    return Fault(kind, after, delay, after_given=after_raw is not None)
