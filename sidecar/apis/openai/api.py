"""OpenAI chat completions, ``POST /v1/chat/completions``, and completions,
``POST /v1/completions``, as wire APIs (pure): one class, :class:`OpenAIApi`, and its two
instances, which differ only in the chunk kind. Reading a request, the bodies the
sidecar sends upstream, and the history it cleans.

- Chat: reasoning arrives in ``delta.reasoning`` (vLLM), ``delta.reasoning_content``
  (llama.cpp, SGLang) or between inline ``<think>`` tags in ``delta.content``; the
  answer in ``delta.content``. Completions: the text in ``choices[].text``, reasoning
  only as inline ``<think>`` tags in it (a raw prompt has no reasoning parser).
- ``include_reasoning: false`` is honoured by asking for the reasoning anyway (it must be
  watched) and removing it from what the client gets.
- Every body function returns a new dict and leaves its input alone. A reissue changes
  only the documented fields: the thinking switch of the model family
  (``reissue.rules``), ``n`` (to the number of choices still open),
  ``stream``/``stream_options`` (so the sidecar can watch a non-streaming request and
  count a reissue's tokens exactly), and for the steps that need it ``model``
  (fallback) or ``messages``, ``continue_final_message`` and ``add_generation_prompt``
  (salvage). Tools, ``response_format``, sampling parameters and ``logprobs`` are kept.
- Chat is the one API with a ``salvage`` step: the request continues from its own
  reasoning, closed. Completions has none: a prompt has no message list to continue.
- History: chat clients that send an earlier turn's reasoning back (``reasoning`` or
  ``reasoning_content`` on an assistant message) get the reasoning the sidecar cut
  replaced by a short note; it is recognized by its length and first characters
  (``sidecar.core.attempt.reasoning_mark``).

The package (no ``__init__.py``: a wire API is these files alone): ``api.py`` is the API
class and its two instances (request facts, bodies, history), ``chunks.py`` the chunk
decoder, ``attempt.py`` the attempt, ``splice.py`` the splicer and ``fold.py`` the
non-streaming body; all shared by both APIs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from detectors.agent_history import chat_history
from detectors.agent_loops import Event
from sidecar.apis.openai.attempt import OpenAIAttempt
from sidecar.apis.openai.chunks import ChunkKind
from sidecar.apis.openai.fold import OpenAIFold
from sidecar.apis.openai.splice import OpenAISplicer
from sidecar.config import Config, ThinkingOffRule
from sidecar.core.attempt import text_mark
from sidecar.core.bodies import (
    prompt_fingerprint,
    thinking_disabled,
    with_thinking_off,
    with_user_note,
)
from sidecar.core.wire import CUT_NOTE, Opened, RequestFacts, WireApi
from sidecar.dialects import Dialect
from sidecar.errors import error_body
from sidecar.labels import Thinking, WatchedRoute
from sidecar.policy.rules import RequestView

#: The fields of an assistant message in which chat clients send reasoning back.
_REASONING_FIELDS = ("reasoning", "reasoning_content")


def facts_of(body: Mapping[str, Any], *, salvageable: bool) -> RequestFacts:
    """The facts of a chat-completions or completions request."""
    n = body.get("n", 1)
    return RequestFacts(
        fingerprint=prompt_fingerprint(body),
        client_stream=body.get("stream") is True,
        choices=max(1, n) if isinstance(n, int) else 1,
        thinking_disabled=thinking_disabled(body),
        usage=wants_usage(body),
        continuous_usage=wants_continuous_usage(body),
        hide_reasoning=body.get("include_reasoning") is False,
        salvageable=salvageable,
    )


def client_thinking(body: Mapping[str, Any]) -> Thinking | None:
    """What the client asked of thinking: ``chat_template_kwargs.enable_thinking`` or
    ``thinking``, else ``reasoning_effort`` (``none`` is off, any other effort on)."""
    kwargs = body.get("chat_template_kwargs")
    if isinstance(kwargs, Mapping):
        for key in ("enable_thinking", "thinking"):
            if isinstance(kwargs.get(key), bool):
                return "on" if kwargs[key] else "off"
    effort = body.get("reasoning_effort")
    if isinstance(effort, str):
        return "off" if effort == "none" else "on"
    return None


def wants_continuous_usage(body: Mapping[str, Any]) -> bool:
    """Whether a streaming client asked for cumulative usage on every chunk."""
    opts = body.get("stream_options")
    return isinstance(opts, dict) and opts.get("include_usage") is True and (
        opts.get("continuous_usage_stats") is True)


def wants_usage(body: Mapping[str, Any]) -> bool:
    """Whether the client gets usage: a non-streaming request, or ``include_usage``."""
    opts = body.get("stream_options")
    return body.get("stream") is not True or (
        isinstance(opts, dict) and opts.get("include_usage") is True)


def watched_body(body: Mapping[str, Any], *, client_stream: bool) -> dict[str, Any]:
    """The body sent upstream for a watched request: a non-streaming request becomes a
    stream with usage, so it can be watched and reassembled."""
    if client_stream:
        return dict(body)
    out = dict(body)
    out["stream"] = True
    out["stream_options"] = {"include_usage": True}
    return out


def _counted(out: dict[str, Any]) -> dict[str, Any]:
    """A reissue streams with cumulative usage on every chunk, so the sidecar knows its
    prompt size and exact token count even when it is cut in turn (the client's own usage
    wishes are honoured when the chunks are rewritten)."""
    out["stream"] = True
    out["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    return out


def no_think_body(
    body: Mapping[str, Any], rules: Sequence[ThinkingOffRule], *, client_stream: bool,
    open_choices: int, model: str | None = None,
) -> dict[str, Any]:
    """The ``no-think`` (and, with ``model``, ``fallback:MODEL``) reissue."""
    out = watched_body(body, client_stream=client_stream)
    if model is not None:
        out["model"] = model
    out = with_thinking_off(out, rules)
    if "n" in out or open_choices != 1:
        out["n"] = open_choices
    return _counted(out)


def salvage_body(
    body: Mapping[str, Any], reasoning: str, *, client_stream: bool,
) -> dict[str, Any] | None:
    """Continue a chat request from the useful part of its own reasoning, closed with
    ``</think>``, so the model answers from it. None for requests that cannot be
    continued (``n>1``, no message list)."""
    if not can_salvage(body):
        return None
    out = watched_body(body, client_stream=client_stream)
    prefix = f"<think>\n{reasoning.strip()}\n</think>\n\n"
    out["messages"] = [*body["messages"], {"role": "assistant", "content": prefix}]
    out["continue_final_message"] = True
    out["add_generation_prompt"] = False
    return _counted(out)


def can_salvage(body: Mapping[str, Any]) -> bool:
    """Whether :func:`salvage_body` can continue ``body``: a message list and one choice."""
    n = body.get("n", 1)
    return isinstance(body.get("messages"), list) and not (isinstance(n, int) and n > 1)


def _history_reasoning(body: Mapping[str, Any]) -> list[str]:
    found = []
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else ():
        if isinstance(message, Mapping) and message.get("role") == "assistant":
            found += [message[key] for key in _REASONING_FIELDS
                      if isinstance(message.get(key), str) and message[key]]
    return found


def _cleaned(message: Any, cut: set[str]) -> Any:
    if not isinstance(message, Mapping) or message.get("role") != "assistant":
        return message
    out = dict(message)
    for key in _REASONING_FIELDS:
        text = out.get(key)
        if isinstance(text, str) and text and text_mark(text) in cut:
            out[key] = CUT_NOTE
    return out


class OpenAIApi(WireApi):
    """A chat-completions or completions API (``kind``)."""

    stream_type = "text/event-stream"

    def __init__(self, kind: ChunkKind, *, name: str, route: WatchedRoute, path: str) -> None:
        self.kind = kind
        self.name, self.route, self.path = name, route, path

    def view(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> RequestView:
        return RequestView.of(body, self.route, headers, self.max_tokens(body))

    def client_thinking(self, body: Mapping[str, Any]) -> Thinking | None:
        return client_thinking(body)

    def facts(self, body: Mapping[str, Any]) -> RequestFacts:
        return facts_of(body, salvageable=self.kind == "chat"
                                 and can_salvage(body))

    def off_rules(self, config: Config, dialect: Dialect) -> Sequence[ThinkingOffRule]:
        return config.reissue.rules

    def thinking_off(self, body: Mapping[str, Any],
                     rules: Sequence[ThinkingOffRule]) -> dict[str, Any]:
        return with_thinking_off(body, rules)

    def first_body(self, body: Mapping[str, Any], facts: RequestFacts) -> dict[str, Any] | None:
        if facts.client_stream:
            return None
        return watched_body(body, client_stream=False)

    def reissue_body(self, body: Mapping[str, Any], step: str, facts: RequestFacts, *,
                     rules: Sequence[ThinkingOffRule], open_choices: int,
                     reasoning: str = "") -> dict[str, Any]:
        if step == "salvage":
            out = salvage_body(body, reasoning, client_stream=facts.client_stream)
            assert out is not None, "the ladder takes salvage only where facts.salvageable"
            return out
        model = step.split(":", 1)[1] if step.startswith("fallback:") else None
        return no_think_body(body, rules, client_stream=facts.client_stream,
                                      open_choices=open_choices, model=model)

    def open(self, facts: RequestFacts, dialect: Dialect, *, request_id: str,
             model: str | None) -> Opened:
        kind = self.kind
        fold = None if facts.client_stream else OpenAIFold(
            kind, hide_reasoning=facts.hide_reasoning, layout=dialect.body_layout)
        splicer = OpenAISplicer(kind, fold, request_id=request_id, model=model)
        return Opened(splicer, fold, lambda spec: OpenAIAttempt(kind, spec, facts, splicer, fold))

    def history_marks(self, body: Mapping[str, Any]) -> list[str]:
        """The marks of the reasoning a chat request's assistant messages carry back."""
        if self.kind != "chat":
            return []
        return [text_mark(text) for text in _history_reasoning(body)]

    def agent_history(self, body: Mapping[str, Any], window: int) -> list[Event]:
        return chat_history(body, window) if self.kind == "chat" else []

    def with_loop_note(self, body: Mapping[str, Any], note: str) -> dict[str, Any] | None:
        """A chat body with ``note`` as a user message after the tool results."""
        return with_user_note(body, note) if self.kind == "chat" else None

    def clean_history(self, body: Mapping[str, Any], cut: set[str]) -> dict[str, Any]:
        out = dict(body)
        messages = body.get("messages")
        if self.kind == "chat" and isinstance(messages, list):
            out["messages"] = [_cleaned(m, cut) for m in messages]
        return out

    def error_body(self, status: int, message: str, error_type: str,
                   param: str | None = None) -> bytes:
        return error_body(message, error_type, status, param)


CHAT = OpenAIApi("chat", name="openai.chat", route="chat", path="/v1/chat/completions")
COMPLETIONS = OpenAIApi("completions", name="openai.completions", route="completions",
                        path="/v1/completions")
