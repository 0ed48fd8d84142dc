"""Watched attempts built for tests the way the proxy builds them: through the wire API's
facts, fold, splicer and attempt (``sidecar.apis``), with test-friendly defaults."""

from __future__ import annotations

from collections.abc import Mapping

from detectors import DetectorConfig
from sidecar.apis.openai.api import CHAT, COMPLETIONS, OpenAIApi
from sidecar.apis.openai.attempt import OpenAIAttempt
from sidecar.apis.openai.chunks import ChunkKind
from sidecar.apis.openai.splice import Head, OpenAISplicer
from sidecar.core.attempt import AttemptSpec, Totals
from sidecar.core.wire import RequestFacts
from sidecar.dialects import DIALECTS


def chunk_api(kind: ChunkKind) -> OpenAIApi:
    """The OpenAI API of chunk kind ``kind``."""
    return CHAT if kind == "chat" else COMPLETIONS


def chunk_attempt(
    kind: ChunkKind = "chat", *, number: int = 0, detectors: DetectorConfig | None = None,
    started_at: float = 0.0, head: Head | None = None,
    index_map: Mapping[int, int] | None = None, aggregate: bool = False,
    earlier: Totals | None = None, stop_on_verdict: bool = True, keep_reasoning: bool = True,
    hide_reasoning: bool = False, client_usage: bool = False,
    client_continuous_usage: bool = False, step: str = "original", record_chars: int = 0,
) -> OpenAIAttempt:
    """One chat-completions or completions attempt: to a streaming client, or with
    ``aggregate`` to a non-streaming one (its aggregator is ``attempt.aggregator``); a
    reissue (``number`` > 0) rewrites to ``head``."""
    api = chunk_api(kind)
    facts = RequestFacts(fingerprint="", client_stream=not aggregate, usage=client_usage,
                         continuous_usage=client_continuous_usage,
                         hide_reasoning=hide_reasoning)
    opened = api.open(facts, DIALECTS["vllm"], request_id="test", model="m")
    assert isinstance(opened.splicer, OpenAISplicer)
    opened.splicer.head = head
    spec = AttemptSpec(number=number, detectors=detectors or DetectorConfig(),
                       started_at=started_at, exchange_started=started_at,
                       earlier=earlier or Totals(),
                       step=step, index_map=index_map or {},
                       stop_on_verdict=stop_on_verdict, keep_reasoning=keep_reasoning,
                       record_chars=record_chars)
    attempt = opened.attempt(spec)
    assert isinstance(attempt, OpenAIAttempt)
    return attempt
