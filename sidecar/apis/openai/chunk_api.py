"""What OpenAI's two chunk-streaming APIs share as wire APIs (pure): the ``WireApi`` parts
of chat completions and completions that differ only in the chunk kind."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sidecar.apis.openai import requests
from sidecar.apis.openai.attempt import ChunkAttempt
from sidecar.apis.openai.chunks import ChunkKind
from sidecar.apis.openai.fold import Aggregator
from sidecar.apis.openai.splice import ChunkSplicer
from sidecar.config import Config, ThinkingOffRule
from sidecar.core.bodies import with_thinking_off
from sidecar.core.wire import Opened, RequestFacts, WireApi
from sidecar.dialects import Dialect
from sidecar.errors import error_body
from sidecar.labels import Thinking
from sidecar.policy.rules import RequestView


class ChunkApi(WireApi):
    """A chat-completions or completions API (``kind``)."""

    kind: ChunkKind
    stream_type = "text/event-stream"

    def view(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> RequestView:
        return RequestView.of(body, self.route, headers, self.max_tokens(body))

    def client_thinking(self, body: Mapping[str, Any]) -> Thinking | None:
        return requests.client_thinking(body)

    def facts(self, body: Mapping[str, Any]) -> RequestFacts:
        return requests.facts_of(body, salvageable=self.kind == "chat"
                                 and requests.can_salvage(body))

    def off_rules(self, config: Config, dialect: Dialect) -> Sequence[ThinkingOffRule]:
        return config.reissue.rules

    def thinking_off(self, body: Mapping[str, Any],
                     rules: Sequence[ThinkingOffRule]) -> dict[str, Any]:
        return with_thinking_off(body, rules)

    def first_body(self, body: Mapping[str, Any], facts: RequestFacts) -> dict[str, Any] | None:
        if facts.client_stream:
            return None
        return requests.watched_body(body, client_stream=False)

    def reissue_body(self, body: Mapping[str, Any], step: str, facts: RequestFacts, *,
                     rules: Sequence[ThinkingOffRule], open_choices: int,
                     reasoning: str = "") -> dict[str, Any]:
        if step == "salvage":
            out = requests.salvage_body(body, reasoning, client_stream=facts.client_stream)
            assert out is not None, "the ladder takes salvage only where facts.salvageable"
            return out
        model = step.split(":", 1)[1] if step.startswith("fallback:") else None
        return requests.no_think_body(body, rules, client_stream=facts.client_stream,
                                      open_choices=open_choices, model=model)

    def open(self, facts: RequestFacts, dialect: Dialect, *, request_id: str,
             model: str | None) -> Opened:
        kind = self.kind
        fold = None if facts.client_stream else Aggregator(
            kind, hide_reasoning=facts.hide_reasoning, layout=dialect.body_layout)
        splicer = ChunkSplicer(kind, fold, request_id=request_id, model=model)
        return Opened(splicer, fold, lambda spec: ChunkAttempt(kind, spec, facts, splicer, fold))

    def error_body(self, status: int, message: str, error_type: str,
                   param: str | None = None) -> bytes:
        return error_body(message, error_type, status, param)
