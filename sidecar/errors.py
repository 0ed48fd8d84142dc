"""The sidecar's exceptions, and the one place where aiohttp's (and ``sidecar.codecs.http1``'s)
are mapped onto them.

::

    SidecarError
    ├── ConfigError(ValueError)            bad config file, flag or env var; exit code 2
    ├── RequestTooLarge                    client body over ``max_body_bytes``; 413
    └── UpstreamError                      anything that went wrong talking to the upstream
        ├── UpstreamConnectError           refused, DNS, reset before headers; 502
        ├── UpstreamTimeoutError(TimeoutError)  connect/read timeout, stall; 504
        ├── UpstreamDisconnected           the upstream closed mid-stream; 502
        └── UpstreamProtocolError          invalid SSE or JSON from the upstream; 502

Before the client has seen a status line an ``UpstreamError`` becomes an OpenAI-style
JSON body with its ``status``; afterwards it travels in the stream as
``data: {"error": ...}`` followed by ``data: [DONE]`` (:func:`error_body`).
"""

from __future__ import annotations

import asyncio

import aiohttp
import orjson

from sidecar.codecs.http1 import ProtocolError, Truncated
from sidecar.labels import UpstreamErrorKind


class SidecarError(Exception):
    """Base of every exception the sidecar raises on purpose."""


class ConfigError(SidecarError, ValueError):
    """A configuration value is missing, unknown or of the wrong type; the message names the key."""


class RequestTooLarge(SidecarError):
    """The client's request body is larger than the configured limit."""


class UpstreamError(SidecarError):
    """Talking to the upstream failed. ``status`` is what a client sees before headers."""

    status: int = 502
    kind: UpstreamErrorKind = "connect"
    error_type: str = "BadGatewayError"


class UpstreamConnectError(UpstreamError):
    """The upstream could not be reached or dropped the connection before sending headers."""


class UpstreamTimeoutError(UpstreamError, TimeoutError):
    """The upstream did not answer or stopped sending within the configured timeout."""

    status = 504
    kind = "timeout"
    error_type = "GatewayTimeoutError"


class UpstreamDisconnected(UpstreamError):
    """The upstream closed the connection in the middle of a response."""

    kind = "reset"


class UpstreamProtocolError(UpstreamError):
    """The upstream sent bytes that are not a valid SSE stream of JSON chunks."""

    kind = "protocol"


def map_upstream_exception(exc: BaseException, *, headers_received: bool) -> UpstreamError:
    """Translate an aiohttp/asyncio exception raised while talking to the upstream.

    ``headers_received`` tells a reset before the status line (a connect error) from a
    reset in the middle of the body.
    """
    if isinstance(exc, UpstreamError):
        return exc
    if isinstance(exc, Truncated):
        if headers_received:
            return UpstreamDisconnected("upstream closed the connection mid-response")
        return UpstreamConnectError("upstream closed the connection before answering")
    if isinstance(exc, ProtocolError):
        return UpstreamProtocolError(f"upstream sent a malformed HTTP response: {exc}")
    if isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return UpstreamTimeoutError("upstream timed out")
    if isinstance(exc, aiohttp.ClientPayloadError) or headers_received:
        return UpstreamDisconnected("upstream closed the connection mid-response")
    if isinstance(exc, (aiohttp.ClientError, OSError)):
        return UpstreamConnectError(f"upstream unreachable: {type(exc).__name__}")
    return UpstreamConnectError(f"upstream failed: {type(exc).__name__}")


def error_body(message: str, error_type: str, code: int, param: str | None = None) -> bytes:
    """An OpenAI/vLLM-style error object: ``{"error": {message, type, param, code}}``."""
    return orjson.dumps(
        {"error": {"message": message, "type": error_type, "param": param, "code": code}}
    )


def upstream_error_body(err: UpstreamError) -> bytes:
    """The JSON error a client receives for ``err``."""
    return error_body(str(err), err.error_type, err.status)
