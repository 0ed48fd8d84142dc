"""Ollama's native chat, ``POST /api/chat``, and generate, ``POST /api/generate``, as wire
APIs (pure): one class, :class:`OllamaApi`, and its two instances, which differ only in
the line kind. Reading a request and the bodies the sidecar sends upstream.

Chat has thinking in ``message.thinking`` and the answer in ``message.content``;
generate has them in ``thinking`` and ``response``. ``think: false`` turns thinking off
(``"low"`` for gpt-oss, which accepts levels only). Ollama streams unless the request
says ``"stream": false``; the sidecar always asks for a stream, to watch it. A chat
request's history (``tool_calls`` and ``tool`` messages) is checked for agent loops
(``detectors.agent_history.ollama_history``).

The package (no ``__init__.py``: a wire API is these files alone): ``api.py`` is the API
class and its two instances (request facts, bodies), ``attempt.py`` the line model and
the attempt, ``splice.py`` the splicer and the lines it writes, ``fold.py`` the
non-streaming body; all shared by both APIs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from detectors.agent_history import ollama_history
from detectors.agent_loops import Event
from sidecar.apis.ollama.attempt import OllamaAttempt
from sidecar.apis.ollama.fold import LineKind, OllamaFold
from sidecar.apis.ollama.splice import OllamaSplicer
from sidecar.config import Config, ThinkingOffRule
from sidecar.core.bodies import (
    prompt_fingerprint,
    thinking_disabled,
    with_thinking_off,
    with_user_note,
)
from sidecar.core.wire import Opened, RequestFacts, WireApi
from sidecar.dialects import Dialect
from sidecar.labels import Thinking, WatchedRoute
from sidecar.policy.rules import RequestView

NDJSON_TYPE = "application/x-ndjson"


def client_streams(body: Mapping[str, Any]) -> bool:
    """Ollama streams unless the request says ``"stream": false``."""
    return body.get("stream") is not False


def watched_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """The body sent upstream: always streaming, so the sidecar can watch it."""
    out = dict(body)
    out["stream"] = True
    return out


def no_think_body(body: Mapping[str, Any], rules: Sequence[ThinkingOffRule], *,
                  model: str | None = None) -> dict[str, Any]:
    """The thinking-off reissue (``think: false``; levels only for gpt-oss), on
    ``model`` when the ladder step is a fallback."""
    out = watched_body(body)
    if model is not None:
        out["model"] = model
    return with_thinking_off(out, rules)


class OllamaApi(WireApi):
    """Ollama's ``/api/chat`` or ``/api/generate`` (``kind``)."""

    stream_type = NDJSON_TYPE
    ollama_native = True

    def __init__(self, kind: LineKind, *, name: str, route: WatchedRoute, path: str) -> None:
        self.kind = kind
        self.name, self.route, self.path = name, route, path

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
                            client_stream=client_streams(body),
                            thinking_disabled=thinking_disabled(body))

    def off_rules(self, config: Config, dialect: Dialect) -> Sequence[ThinkingOffRule]:
        return dialect.native_thinking_off

    def thinking_off(self, body: Mapping[str, Any],
                     rules: Sequence[ThinkingOffRule]) -> dict[str, Any]:
        return with_thinking_off(body, rules)

    def first_body(self, body: Mapping[str, Any], facts: RequestFacts) -> dict[str, Any] | None:
        return None if facts.client_stream else watched_body(body)

    def reissue_body(self, body: Mapping[str, Any], step: str, facts: RequestFacts, *,
                     rules: Sequence[ThinkingOffRule], open_choices: int,
                     reasoning: str = "") -> dict[str, Any]:
        model = step.split(":", 1)[1] if step.startswith("fallback:") else None
        return no_think_body(body, rules, model=model)

    def open(self, facts: RequestFacts, dialect: Dialect, *, request_id: str,
             model: str | None) -> Opened:
        kind = self.kind
        fold = None if facts.client_stream else OllamaFold(kind)
        splicer = OllamaSplicer(kind, fold, model=model)
        return Opened(splicer, fold, lambda spec: OllamaAttempt(kind, spec, splicer, fold))

    def agent_history(self, body: Mapping[str, Any], window: int) -> list[Event]:
        return ollama_history(body, window) if self.kind == "chat" else []

    def with_loop_note(self, body: Mapping[str, Any], note: str) -> dict[str, Any] | None:
        """A chat body with ``note`` as a user message after the tool results."""
        return with_user_note(body, note) if self.kind == "chat" else None

    def error_body(self, status: int, message: str, error_type: str,
                   param: str | None = None) -> bytes:
        return orjson.dumps({"error": message})


OLLAMA_CHAT = OllamaApi("chat", name="ollama.chat", route="chat", path="/api/chat")
OLLAMA_GENERATE = OllamaApi("generate", name="ollama.generate", route="completions",
                            path="/api/generate")
