"""The sidecar's exception tree, and the one mapping of the layers' exceptions onto it."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import aiohttp
import pytest

import sidecar.net
import sidecar.service
from sidecar import errors
from sidecar.codecs.http1 import ProtocolError, Truncated
from sidecar.errors import (
    ClientBodyTimeout,
    RequestTooLarge,
    SidecarError,
    UpstreamConnectError,
    UpstreamDisconnected,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamTimeoutError,
    Waited,
    map_upstream_exception,
)

#: (exception, headers received, timer) -> (the sidecar's class, its message or None).
MAPPING: list[tuple[BaseException, bool, Waited | None, type[UpstreamError], str | None]] = [
    (Truncated("x"), False, None, UpstreamConnectError,
     "upstream closed the connection before answering"),
    (Truncated("x"), True, None, UpstreamDisconnected,
     "upstream closed the connection mid-response"),
    (ProtocolError("bad status line"), False, None, UpstreamProtocolError,
     "upstream sent a malformed HTTP response: bad status line"),
    (TimeoutError(), False, Waited("connect", 0.3), UpstreamTimeoutError,
     "upstream connect timed out after 0.3 s"),
    (TimeoutError(), False, Waited("head", 30.0), UpstreamTimeoutError,
     "no response from upstream within 30 s"),
    (TimeoutError(), True, Waited("silence", 0.5), UpstreamTimeoutError,
     "no bytes from upstream for 0.5 s"),
    (TimeoutError(), True, None, UpstreamTimeoutError, "upstream timed out"),
    (aiohttp.ServerTimeoutError(), False, None, UpstreamTimeoutError, "upstream timed out"),
    (aiohttp.ClientPayloadError(), False, None, UpstreamDisconnected, None),
    (ConnectionResetError(), True, None, UpstreamDisconnected, None),
    (ConnectionRefusedError(), False, None, UpstreamConnectError,
     "upstream unreachable: ConnectionRefusedError"),
    (aiohttp.ClientConnectionError(), False, None, UpstreamConnectError, None),
    # A timer only names a timeout: any other exception maps as without it.
    (ConnectionRefusedError(), False, Waited("connect", 1.0), UpstreamConnectError, None),
    (ValueError(), False, None, UpstreamConnectError, "upstream failed: ValueError"),
]


@pytest.mark.parametrize(("exc", "headers", "waited", "kind", "message"), MAPPING)
def test_mapping(exc: BaseException, headers: bool, waited: Waited | None,
                 kind: type[UpstreamError], message: str | None) -> None:
    """Each layer's exception becomes one of the sidecar's, with the message a client sees."""
    got = map_upstream_exception(exc, headers_received=headers, waited=waited)
    assert type(got) is kind
    if message is not None:
        assert str(got) == message


def test_an_upstream_error_maps_to_itself() -> None:
    """An exception already of the tree passes as it is, whatever the timer."""
    err = UpstreamTimeoutError("upstream connect timed out after 1 s")
    assert map_upstream_exception(err, headers_received=True,
                                  waited=Waited("silence", 5.0)) is err


def test_timeouts_stay_timeouts() -> None:
    """An upstream timeout is still a ``TimeoutError`` to code that waits on the sidecar."""
    got = map_upstream_exception(TimeoutError(), headers_received=False,
                                 waited=Waited("head", 2.0))
    assert isinstance(got, TimeoutError)
    assert got.status == 504


def test_client_errors_are_in_the_tree() -> None:
    """The client's own failures are sidecar errors too."""
    assert issubclass(ClientBodyTimeout, SidecarError)
    assert issubclass(RequestTooLarge, SidecarError)


def _modules(package: ModuleType) -> list[ModuleType]:
    return [importlib.import_module(m.name)
            for m in pkgutil.iter_modules(package.__path__, package.__name__ + ".")]


@pytest.mark.parametrize("module", [*_modules(sidecar.net), *_modules(sidecar.service), errors],
                         ids=lambda m: m.__name__)
def test_io_layer_defines_only_sidecar_errors(module: ModuleType) -> None:
    """Every exception class the I/O layer (and ``errors``) names for others to catch is a
    ``SidecarError``: nothing else is raised out of it on purpose."""
    for name, value in vars(module).items():
        if (inspect.isclass(value) and issubclass(value, BaseException)
                and value.__module__ == module.__name__ and not name.startswith("_")):
            assert issubclass(value, SidecarError), name
