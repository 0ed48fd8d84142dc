"""Where the random parts of a response (ids, signatures) come from. Pure: the node
injects its seeded generator, tests inject counters."""

from __future__ import annotations

from typing import Protocol


class Draw(Protocol):
    """Where the random parts of a response come from (the node's seeded generator)."""

    def hex(self, digits: int) -> str:
        """``digits`` random lowercase hex digits."""

    def alnum(self, length: int) -> str:
        """``length`` random ASCII letters and digits."""

    def number(self, below: int) -> int:
        """A random integer in ``[0, below)``."""
