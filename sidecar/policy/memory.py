"""Runaway memory: prompts that ran away recently go straight to thinking off (pure).

Harnesses retry the same prompt (three runs is common); without memory each retry pays
for detection again. Entries are prompt fingerprints (never prompts), expire after
``ttl`` seconds and are bounded by ``max_entries`` (oldest first out). Time is passed in.
"""

from __future__ import annotations

from collections import OrderedDict


class RunawayMemory:
    """A bounded TTL set of fingerprints."""

    __slots__ = ("_entries", "_max", "_ttl")

    def __init__(self, ttl: float, max_entries: int) -> None:
        self._ttl = ttl
        self._max = max_entries
        self._entries: OrderedDict[str, float] = OrderedDict()

    def remember(self, fingerprint: str, now: float) -> None:
        """Record that ``fingerprint`` ran away at ``now``."""
        self._entries[fingerprint] = now + self._ttl
        self._entries.move_to_end(fingerprint)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def recalls(self, fingerprint: str, now: float) -> bool:
        """Whether ``fingerprint`` ran away within the last ``ttl`` seconds."""
        expires = self._entries.get(fingerprint)
        if expires is None:
            return False
        if expires <= now:
            del self._entries[fingerprint]
            return False
        return True

    def __len__(self) -> int:
        return len(self._entries)
