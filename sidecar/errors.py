"""The sidecar's exceptions, and the one place where aiohttp's (and ``sidecar.codecs.http1``'s)
are mapped onto them.

::

    SidecarError
    ├── ConfigError(ValueError)            bad config file, flag or env var; exit code 2
    ├── RequestTooLarge                    client body over ``max_body_bytes``; 413
    ├── ClientBodyTimeout                  the client went silent mid-body; 408
    └── UpstreamError                      anything that went wrong talking to the upstream
        ├── UpstreamConnectError           refused, DNS, reset before headers; 502
        ├── UpstreamTimeoutError(TimeoutError)  connect/read timeout, stall; 504
        ├── UpstreamDisconnected           the upstream closed mid-stream; 502
        └── UpstreamProtocolError          invalid SSE or JSON from the upstream; 502

Every exception that leaves the I/O layer (``sidecar.net``, ``sidecar.service``) is one
of these. What the layers below raise stays theirs and is mapped here, in
:func:`map_upstream_exception`: aiohttp's and asyncio's exceptions, the HTTP/1.1 codec's
(:mod:`sidecar.codecs.http1`), and the expiry of one of the sidecar's own upstream timers
(:class:`Waited`).

Before the client has seen a status line an ``UpstreamError`` becomes an OpenAI-style
JSON body with its ``status``; afterwards it travels in the stream as
``data: {"error": ...}`` followed by ``data: [DONE]`` (:func:`error_body`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Literal

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


class ClientBodyTimeout(SidecarError):
    """The client sent no byte of its request body for ``client_body_timeout_seconds``."""


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


#: What the sidecar waited for when one of its own upstream timers expired, and the message
#: the client gets for it (``{:g}``: the timer's seconds).
_WAITED_FOR = {
    "connect": "upstream connect timed out after {:g} s",
    "head": "no response from upstream within {:g} s",
    "silence": "no bytes from upstream for {:g} s",
}


@dataclass(frozen=True, slots=True)
class Waited:
    """One of the sidecar's own timers on the upstream, which expired: ``connect`` (a new
    connection), ``head`` (the response's head after the request was sent) or ``silence``
    (the next body bytes), after ``seconds``."""

    what: Literal["connect", "head", "silence"]
    seconds: float


def map_upstream_exception(exc: BaseException, *, headers_received: bool,
                           waited: Waited | None = None) -> UpstreamError:
    """Translate an exception raised while talking to the upstream (aiohttp's, asyncio's
    or the HTTP/1.1 codec's) into the sidecar's own; an ``UpstreamError`` is returned as it
    is.

    ``headers_received`` tells a reset before the status line (a connect error) from a
    reset in the middle of the body. ``waited``: the ``TimeoutError`` is the expiry of
    that timer of the sidecar's, and its message says which.
    """
    if isinstance(exc, UpstreamError):
        return exc
    if waited is not None and isinstance(exc, TimeoutError):
        return UpstreamTimeoutError(_WAITED_FOR[waited.what].format(waited.seconds))
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
