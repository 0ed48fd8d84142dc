"""What Ollama's two native APIs share as wire APIs (pure): the ``WireApi`` parts of
``/api/chat`` and ``/api/generate`` that differ only in the line kind."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from sidecar.apis.ollama import lines
from sidecar.apis.ollama.attempt import LineAttempt
from sidecar.apis.ollama.fold import Folder
from sidecar.apis.ollama.splice import LineSplicer
from sidecar.config import Config, ThinkingOffRule
from sidecar.core.bodies import prompt_fingerprint, thinking_disabled, with_thinking_off
from sidecar.core.wire import Opened, RequestFacts, WireApi
from sidecar.dialects import Dialect
from sidecar.labels import Thinking
from sidecar.policy.rules import RequestView


class LineApi(WireApi):
    """Ollama's ``/api/chat`` or ``/api/generate`` (``kind``)."""

    kind: lines.LineKind
    stream_type = lines.NDJSON_TYPE
    ollama_native = True

    def view(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> RequestView:
        return RequestView.of(body, self.route, headers, self.max_tokens(body))

    def client_thinking(self, body: Mapping[str, Any]) -> Thinking | None:
        """``think``: false is off; true or a level (``"low"``...) is on."""
        think = body.get("think")
        if think is False:
            return "off"
        if think is True or isinstance(think, str):
            return "on"
        return None

    def facts(self, body: Mapping[str, Any]) -> RequestFacts:
        return RequestFacts(fingerprint=prompt_fingerprint(body),
                            client_stream=lines.client_streams(body),
                            thinking_disabled=thinking_disabled(body))

    def off_rules(self, config: Config, dialect: Dialect) -> Sequence[ThinkingOffRule]:
        return dialect.native_thinking_off

    def thinking_off(self, body: Mapping[str, Any],
                     rules: Sequence[ThinkingOffRule]) -> dict[str, Any]:
        return with_thinking_off(body, rules)

    def first_body(self, body: Mapping[str, Any], facts: RequestFacts) -> dict[str, Any] | None:
        return None if facts.client_stream else lines.watched_body(body)

    def reissue_body(self, body: Mapping[str, Any], step: str, facts: RequestFacts, *,
                     rules: Sequence[ThinkingOffRule], open_choices: int,
                     reasoning: str = "") -> dict[str, Any]:
        model = step.split(":", 1)[1] if step.startswith("fallback:") else None
        return lines.no_think_body(body, rules, model=model)

    def open(self, facts: RequestFacts, dialect: Dialect, *, request_id: str,
             model: str | None) -> Opened:
        kind = self.kind
        fold = None if facts.client_stream else Folder(kind)
        splicer = LineSplicer(kind, fold, model=model)
        return Opened(splicer, fold, lambda spec: LineAttempt(kind, spec, splicer, fold))

    def error_body(self, status: int, message: str, error_type: str,
                   param: str | None = None) -> bytes:
        return orjson.dumps({"error": message})
