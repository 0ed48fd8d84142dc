"""Anthropic Messages, ``POST /v1/messages`` (Claude Code), as a wire API (pure): reading a
request, the bodies the sidecar sends upstream, and the history it cleans.

- Thinking is the client's ``thinking`` (``enabled`` with ``budget_tokens``,
  ``disabled``, ``adaptive``) or vLLM's ``chat_template_kwargs``. The sidecar enforces
  ``budget_tokens`` itself, as a thinking-token budget: vLLM's own is not reliable under
  MTP speculative decoding.
- Thinking off (a reissue, or a policy decision) is ``thinking: {"type": "disabled"}``
  (``budget_tokens`` dropped) and the model family's ``chat_template_kwargs`` switch as
  well: vLLM maps ``disabled`` to an effort that leaves thinking on for some templates,
  and llama.cpp ignores ``disabled`` (``chat_template_kwargs`` works on both); Ollama
  maps ``disabled`` to ``think: false``. Tools, ``tool_choice``, ``system``, sampling
  and ``output_config`` are kept.
- There is no salvage step: the API has no way to continue a message.
- History: Claude Code sends the previous turns' thinking blocks back with their
  signatures. A block the sidecar cut carries a signature of its own
  (``splice.MARK_PREFIX``); when it comes back it is replaced by a short note.
- Errors the sidecar makes itself have Anthropic's shape,
  ``{"type": "error", "error": {"type", "message"}}``.

The package (no ``__init__.py``: a wire API is these files alone): ``api.py`` is the API
(request facts, bodies, history), ``attempt.py`` the stream decoder, ``splice.py`` the
splicer and ``fold.py`` the non-streaming body.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from detectors.agent_history import messages_history
from detectors.agent_loops import Event
from sidecar.apis.messages.attempt import MessagesAttempt
from sidecar.apis.messages.fold import MessagesFold
from sidecar.apis.messages.splice import MARK_PREFIX, MessagesSplicer, error_object
from sidecar.apis.sse_events import EventApi, content_text, kwargs_thinking
from sidecar.config import Config, ThinkingOffRule
from sidecar.core.bodies import deep_merge, prompt_fingerprint, thinking_off_patch
from sidecar.core.wire import CUT_NOTE, Opened, RequestFacts
from sidecar.dialects import Dialect
from sidecar.labels import Thinking
from sidecar.policy.rules import RequestView


def _thinking_type(body: Mapping[str, Any]) -> Any:
    thinking = body.get("thinking")
    return thinking.get("type") if isinstance(thinking, Mapping) else None


class MessagesApi(EventApi):
    """``POST /v1/messages``."""

    name = "anthropic.messages"
    route = "messages"
    path = "/v1/messages"

    # -- reading a request -----------------------------------------------------------

    def view(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> RequestView:
        last_user = ""
        messages = body.get("messages")
        for message in messages if isinstance(messages, list) else ():
            if isinstance(message, Mapping) and message.get("role") == "user":
                last_user = content_text(message.get("content"))
        tools = body.get("tools")
        model = body.get("model")
        return RequestView(model if isinstance(model, str) else "", self.route, headers,
                           content_text(body.get("system")), last_user,
                           isinstance(tools, list) and bool(tools), self.max_tokens(body))

    def client_thinking(self, body: Mapping[str, Any]) -> Thinking | None:
        """``thinking.type`` enabled or disabled, else ``chat_template_kwargs``."""
        kind = _thinking_type(body)
        if kind in ("enabled", "disabled"):
            return "on" if kind == "enabled" else "off"
        switch = kwargs_thinking(body)
        return None if switch is None else "on" if switch else "off"

    def facts(self, body: Mapping[str, Any]) -> RequestFacts:
        return RequestFacts(
            fingerprint=prompt_fingerprint(body), client_stream=body.get("stream") is True,
            thinking_disabled=(_thinking_type(body) == "disabled"
                               or kwargs_thinking(body) is False))

    def expose_reasoning(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """Nothing to expose: the Messages API has no field that hides reasoning."""
        return None

    def thinking_budget(self, body: Mapping[str, Any]) -> Any:
        """``thinking.budget_tokens`` when thinking is enabled."""
        thinking = body.get("thinking")
        if isinstance(thinking, Mapping) and thinking.get("type") == "enabled":
            return thinking.get("budget_tokens")
        return None

    # -- request bodies --------------------------------------------------------------

    def off_rules(self, config: Config, dialect: Dialect) -> Sequence[ThinkingOffRule]:
        """The family rules that switch the template (``chat_template_kwargs``), then
        the dialect's fallback switch for the others."""
        family = [r for r in config.reissue.rules if "chat_template_kwargs" in r.set]
        return (*family, *dialect.messages_thinking_off)

    def thinking_off(self, body: Mapping[str, Any],
                     rules: Sequence[ThinkingOffRule]) -> dict[str, Any]:
        out = dict(body)
        out["thinking"] = {"type": "disabled"}
        model = out.get("model")
        kwargs = thinking_off_patch(model if isinstance(model, str) else "", rules).get(
            "chat_template_kwargs")
        if isinstance(kwargs, Mapping):
            out = deep_merge(out, {"chat_template_kwargs": kwargs})
        return out

    # -- streams ---------------------------------------------------------------------

    def open(self, facts: RequestFacts, dialect: Dialect, *, request_id: str,
             model: str | None) -> Opened:
        fold = None if facts.client_stream else MessagesFold()
        splicer = MessagesSplicer(fold, request_id=request_id, model=model)
        return Opened(splicer, fold, lambda spec: MessagesAttempt(spec, splicer, fold))

    # -- history -----------------------------------------------------------------------

    def history_marks(self, body: Mapping[str, Any]) -> list[str]:
        """The signatures of thinking blocks the sidecar cut, found in the history."""
        return [block["signature"] for block in _thinking_blocks(body)
                if isinstance(block.get("signature"), str)
                and block["signature"].startswith(MARK_PREFIX)]

    def agent_history(self, body: Mapping[str, Any], window: int) -> list[Event]:
        return messages_history(body, window)

    def with_loop_note(self, body: Mapping[str, Any], note: str) -> dict[str, Any] | None:
        """The body with ``note`` as a text block at the end of the last user message
        (after its ``tool_result`` blocks, where the API wants them first)."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return None
        last = messages[-1]
        if not isinstance(last, Mapping) or last.get("role") != "user":
            return None
        content = last.get("content")
        blocks = ([{"type": "text", "text": content}] if isinstance(content, str)
                  else list(content) if isinstance(content, list) else None)
        if blocks is None:
            return None
        note_block = {"type": "text", "text": note}
        return {**body, "messages": [*messages[:-1],
                                     {**last, "content": [*blocks, note_block]}]}

    def clean_history(self, body: Mapping[str, Any], cut: set[str]) -> dict[str, Any]:
        out = dict(body)
        messages = []
        for message in body.get("messages") or ():
            content = message.get("content") if isinstance(message, Mapping) else None
            if isinstance(content, list) and any(_is_cut(b, cut) for b in content):
                messages.append({**message, "content": [
                    {**b, "thinking": CUT_NOTE} if _is_cut(b, cut) else b for b in content]})
            else:
                messages.append(message)
        out["messages"] = messages
        return out

    # -- errors ------------------------------------------------------------------------

    def error_body(self, status: int, message: str, error_type: str,
                   param: str | None = None) -> bytes:
        return orjson.dumps(error_object(status, message))


def _thinking_blocks(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    blocks = []
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, list):
            blocks += [b for b in content
                       if isinstance(b, Mapping) and b.get("type") == "thinking"]
    return blocks


def _is_cut(block: Any, cut: set[str]) -> bool:
    return (isinstance(block, Mapping) and block.get("type") == "thinking"
            and block.get("signature") in cut)


MESSAGES = MessagesApi()
