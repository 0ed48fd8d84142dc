"""Bookkeeping and request facts of one watched client request (pure).

``Exchange`` collects what happened (mode, verdicts, attempts, tokens, outcome) for the
metrics and the access line; ``RequestFacts`` and the functions read the facts of a request
body that the proxy needs before and after the upstream answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from detectors import Verdict
from sidecar import ollama
from sidecar.config import Mode
from sidecar.reissue import prompt_fingerprint, thinking_disabled
from sidecar.service.metrics import Outcome
from sidecar.stream import Route

# Choices the sidecar keeps books on per request; vLLM refuses far fewer than this anyway.
MAX_WATCHED_CHOICES = 4096

# orjson parses 1,024 levels of nesting but serializes only 254; the sidecar must be able
# to re-serialize a body it watches (fingerprint, reissues).
MAX_DEPTH_WITHOUT_CHECK = 254


@dataclass(slots=True)
class Exchange:
    """Bookkeeping of one watched client request, for metrics and the access log."""

    route: Route
    model: str | None
    mode: Mode
    request_id: str
    started: float
    client_stream: bool
    max_tokens: int | None = None
    budget_key: str = ""
    hide_reasoning: bool = False
    native: ollama.Kind | None = None  # Ollama's native API (NDJSON), else OpenAI's
    outcome: Outcome = "ok"
    upstream_status: int | None = None
    verdicts: list[Verdict] = field(default_factory=list)
    attempts: int = 0
    thinking_tokens: int = 0
    content_tokens: int = 0
    ttfc_seen: bool = False


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """What handling a watched request needs of its parsed body once the first attempt
    starts. The proxy keeps these and the request's bytes while the stream is open, not
    the parsed body: a coding agent's prompt is tens of kilobytes, and a parsed copy would
    hold it a second time for the whole stream. A reissue parses the bytes again."""

    #: The prompt's fingerprint, for the runaway memory (:func:`prompt_fingerprint`).
    fingerprint: str
    #: Choices asked for (``n``, 1 when absent or not an integer).
    choices: int
    #: The client turned thinking off itself (:func:`thinking_disabled`).
    thinking_disabled: bool
    #: The client gets usage: a non-streaming request, or ``include_usage``.
    usage: bool
    #: A streaming client asked for cumulative usage on every chunk.
    continuous_usage: bool

    @classmethod
    def of(cls, body: dict[str, Any]) -> RequestFacts:
        n = body.get("n", 1)
        return cls(
            fingerprint=prompt_fingerprint(body),
            choices=max(1, n) if isinstance(n, int) else 1,
            thinking_disabled=thinking_disabled(body),
            usage=wants_usage(body),
            continuous_usage=wants_continuous_usage(body),
        )


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


def max_tokens_of(body: dict[str, Any]) -> int | None:
    """The client's generation limit (``max_completion_tokens`` wins, as in vLLM)."""
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def wants_continuous_usage(body: dict[str, Any]) -> bool:
    """Whether a streaming client asked for cumulative usage on every chunk."""
    opts = body.get("stream_options")
    return isinstance(opts, dict) and opts.get("include_usage") is True and (
        opts.get("continuous_usage_stats") is True)


def wants_usage(body: dict[str, Any]) -> bool:
    opts = body.get("stream_options")
    return body.get("stream") is not True or (
        isinstance(opts, dict) and opts.get("include_usage") is True)
