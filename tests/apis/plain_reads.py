"""A recording fake of a template's regular-expression read (``rest``), the pure build's
first way of reading an event (``sidecar.apis.templates.PLAIN_FIRST``): which events it
took, for the tests of both kinds of template (``EventTemplate`` and the chat
``Template``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Protocol


class _Reads(Protocol):
    rest: Callable[[bytes, int], re.Match[bytes] | None]


def record_plain_reads(template: _Reads) -> list[bool]:
    """Replace ``template.rest`` by a fake that reads as it does and records each call:
    True for an event the pattern took, False for one it left to the byte tests."""
    calls: list[bool] = []
    real = template.rest

    def recording(raw: bytes, pos: int) -> re.Match[bytes] | None:
        found = real(raw, pos)
        calls.append(found is not None)
        return found

    template.rest = recording
    return calls
