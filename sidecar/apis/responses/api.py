"""OpenAI Responses, ``POST /v1/responses`` (Codex, the Agents SDK), as a wire API (pure):
reading a request, the bodies the sidecar sends upstream, and the history it cleans.

- Thinking is the client's ``reasoning.effort`` (``none`` is off) or vLLM's
  ``chat_template_kwargs``. There is no per-request thinking budget in this API; the
  sidecar's (``X-Thinking-Budget``, per model, the body's ``thinking_token_budget``)
  applies.
- Thinking off (a reissue, or a policy decision) is ``reasoning: {"effort": "none"}``
  (``"low"`` for gpt-oss, whose Harmony format refuses ``none``) and the model family's
  ``chat_template_kwargs`` switch. Tools, ``tool_choice``, ``instructions``, sampling and
  ``text`` (structured output) are kept; the client still sees its own ``reasoning`` in
  the response objects.
- ``include_reasoning: false`` (a vLLM extra) is honoured as on chat: the sidecar asks
  for the reasoning anyway, to watch it, and drops its items from what the client gets.
- ``background: true`` is passed through unwatched: the response runs detached from the
  connection there (a cut would need ``/cancel``), and vLLM refuses it unless its store
  is enabled.
- There is no salvage step.
- History: Codex sends the previous turns' reasoning items back by id. A reasoning item
  the sidecar cut is remembered by its id; when it comes back its text is replaced by a
  short note.
- Errors have OpenAI's shape.

The package (no ``__init__.py``: a wire API is these files alone): ``api.py`` is the API
(request facts, bodies, history), ``attempt.py`` the stream decoder, ``splice.py`` the
splicer and ``fold.py`` the non-streaming body.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from detectors.agent_history import responses_history
from detectors.agent_loops import Event
from sidecar.apis.responses.attempt import ResponsesAttempt
from sidecar.apis.responses.fold import ResponsesFold
from sidecar.apis.responses.splice import ResponsesSplicer
from sidecar.apis.sse_events import EventApi, content_text, kwargs_thinking
from sidecar.config import Config, ThinkingOffRule
from sidecar.core.bodies import deep_merge, prompt_fingerprint, thinking_off_patch
from sidecar.core.wire import CUT_NOTE, Opened, RequestFacts
from sidecar.dialects import Dialect
from sidecar.errors import error_body
from sidecar.labels import Thinking
from sidecar.policy.rules import RequestView

#: Models that refuse ``reasoning.effort: "none"``: the least they allow is ``low``.
_NO_NONE = ("gpt-oss",)


def _effort(body: Mapping[str, Any]) -> Any:
    reasoning = body.get("reasoning")
    return reasoning.get("effort") if isinstance(reasoning, Mapping) else None


def _fingerprint_key(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the model is asked: model, instructions, input and tools."""
    return {"model": body.get("model"), "system": body.get("instructions"),
            "messages": body.get("input"), "tools": body.get("tools")}


class ResponsesApi(EventApi):
    """``POST /v1/responses``."""

    name = "openai.responses"
    route = "responses"
    path = "/v1/responses"

    # -- reading a request -----------------------------------------------------------

    def view(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> RequestView:
        system, last_user = "", ""
        instructions = body.get("instructions")
        if isinstance(instructions, str):
            system = instructions
        items = body.get("input")
        if isinstance(items, str):
            last_user = items
        for item in items if isinstance(items, list) else ():
            if isinstance(item, Mapping) and item.get("role") in ("system", "developer"):
                system = content_text(item.get("content"))
            elif isinstance(item, Mapping) and item.get("role") == "user":
                last_user = content_text(item.get("content"))
        tools = body.get("tools")
        model = body.get("model")
        return RequestView(model if isinstance(model, str) else "", self.route, headers,
                           system, last_user, isinstance(tools, list) and bool(tools),
                           self.max_tokens(body))

    def client_thinking(self, body: Mapping[str, Any]) -> Thinking | None:
        """``reasoning.effort`` (``none`` is off), else ``chat_template_kwargs``."""
        effort = _effort(body)
        if isinstance(effort, str):
            return "off" if effort == "none" else "on"
        switch = kwargs_thinking(body)
        return None if switch is None else "on" if switch else "off"

    def facts(self, body: Mapping[str, Any]) -> RequestFacts:
        return RequestFacts(
            fingerprint=prompt_fingerprint(_fingerprint_key(body)),
            client_stream=body.get("stream") is True,
            thinking_disabled=_effort(body) == "none" or kwargs_thinking(body) is False,
            hide_reasoning=body.get("include_reasoning") is False,
            echo={"reasoning": body.get("reasoning")})

    def max_tokens(self, body: Mapping[str, Any]) -> int | None:
        value = body.get("max_output_tokens")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def watchable(self, body: Mapping[str, Any]) -> bool:
        return body.get("background") is not True

    # -- request bodies --------------------------------------------------------------

    def off_rules(self, config: Config, dialect: Dialect) -> Sequence[ThinkingOffRule]:
        return config.reissue.rules

    def thinking_off(self, body: Mapping[str, Any],
                     rules: Sequence[ThinkingOffRule]) -> dict[str, Any]:
        model = body.get("model")
        name = model if isinstance(model, str) else ""
        effort = "low" if any(m in name.lower() for m in _NO_NONE) else "none"
        out = deep_merge(body, {"reasoning": {"effort": effort}})
        kwargs = thinking_off_patch(name, rules).get("chat_template_kwargs")
        if isinstance(kwargs, Mapping):
            out = deep_merge(out, {"chat_template_kwargs": kwargs})
        return out

    # -- streams ---------------------------------------------------------------------

    def open(self, facts: RequestFacts, dialect: Dialect, *, request_id: str,
             model: str | None) -> Opened:
        fold = None if facts.client_stream else ResponsesFold()
        splicer = ResponsesSplicer(fold, request_id=request_id, model=model, echo=facts.echo,
                                   hide=facts.hide_reasoning)
        return Opened(splicer, fold, lambda spec: ResponsesAttempt(spec, splicer, fold))

    # -- history -----------------------------------------------------------------------

    def history_marks(self, body: Mapping[str, Any]) -> list[str]:
        """The ids of the reasoning items in the input."""
        return [item["id"] for item in _reasoning_items(body) if isinstance(item.get("id"), str)]

    def agent_history(self, body: Mapping[str, Any], window: int) -> list[Event]:
        return responses_history(body, window)

    def with_loop_note(self, body: Mapping[str, Any], note: str) -> dict[str, Any] | None:
        """The body with ``note`` as a user message item after the call outputs (a
        ``developer`` item is dropped by chat templates that know no such role)."""
        items = body.get("input")
        if not isinstance(items, list) or not items or not isinstance(items[-1], Mapping):
            return None
        last = items[-1]
        if last.get("type", "message") == "message" and last.get("role") != "user":
            return None
        if last.get("type") in ("function_call", "custom_tool_call", "reasoning"):
            return None
        item = {"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": note}]}
        return {**body, "input": [*items, item]}

    def clean_history(self, body: Mapping[str, Any], cut: set[str]) -> dict[str, Any]:
        out = dict(body)
        items = body.get("input")
        if isinstance(items, list):
            out["input"] = [
                {**item, "content": [{"type": "reasoning_text", "text": CUT_NOTE}],
                 "summary": []} if _is_cut(item, cut) else item for item in items]
        return out

    # -- errors ------------------------------------------------------------------------

    def error_body(self, status: int, message: str, error_type: str,
                   param: str | None = None) -> bytes:
        return error_body(message, error_type, status, param)


def _reasoning_items(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    items = body.get("input")
    return [i for i in items if isinstance(i, Mapping) and i.get("type") == "reasoning"] if (
        isinstance(items, list)) else []


def _is_cut(item: Any, cut: set[str]) -> bool:
    return (isinstance(item, Mapping) and item.get("type") == "reasoning"
            and item.get("id") in cut)


RESPONSES = ResponsesApi()
