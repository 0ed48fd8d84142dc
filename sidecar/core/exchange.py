"""The books of one watched client request (pure).

``Exchange`` holds what the request started with (its API, the config snapshot it runs
under, its mode) and collects what happened (verdicts, attempts, tokens, outcome) for the
metrics and the access line. ``watchable`` decides whether a request can be watched at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from detectors import Verdict
from sidecar.config import Config
from sidecar.core.wire import RequestFacts, WireApi
from sidecar.labels import Mode, Outcome

# Choices the sidecar keeps books on per request; vLLM refuses far fewer than this anyway.
MAX_WATCHED_CHOICES = 4096

# orjson parses 1,024 levels of nesting but serializes only 254; the sidecar must be able
# to re-serialize a body it watches (fingerprint, reissues).
MAX_DEPTH_WITHOUT_CHECK = 254


@dataclass(slots=True)
class Exchange:
    """Bookkeeping of one watched client request, for metrics and the access log.

    ``config`` is the snapshot the whole exchange runs under: a reload (SIGHUP) applies
    to requests that start after it, never to the rest of one in flight."""

    api: WireApi
    config: Config
    model: str | None
    mode: Mode
    request_id: str
    started: float
    facts: RequestFacts
    max_tokens: int | None = None
    budget_key: str = ""
    outcome: Outcome = "ok"
    upstream_status: int | None = None
    verdicts: list[Verdict] = field(default_factory=list)
    attempts: int = 0
    thinking_tokens: int = 0
    content_tokens: int = 0
    ttfc_seen: bool = False
    #: A streaming client has been written the end of its response (the last attempt's
    #: end event): leaving after that (Codex closes on ``response.completed``, before the
    #: upstream's end of body) is no disconnect.
    delivered: bool = False

    @property
    def client_stream(self) -> bool:
        """The client reads a stream."""
        return self.facts.client_stream


def watchable(raw: bytes, body: dict[str, Any]) -> bool:
    """Whether the sidecar can watch this request; otherwise it is passed through and vLLM
    judges it. A huge ``n`` would make the per-choice bookkeeping allocate without bound;
    a body nested deeper than orjson serializes could not be fingerprinted or reissued."""
    n = body.get("n")
    if isinstance(n, int) and n > MAX_WATCHED_CHOICES:
        return False
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH_WITHOUT_CHECK:
        return True  # cannot nest deeper than it has brackets: skip the costly check
    try:
        orjson.dumps(body)
    except TypeError:
        return False
    return True
