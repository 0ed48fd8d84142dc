"""Request facts and request bodies of OpenAI chat completions and completions (pure).

Every function returns a new dict and leaves its input alone. A reissue changes only
the documented fields: the thinking switch of the model family (``reissue.rules``),
``n`` (to the number of choices still open), ``stream``/``stream_options`` (so the
sidecar can watch a non-streaming request and count a reissue's tokens exactly), and
for the steps that need it ``model`` (fallback) or ``messages``,
``continue_final_message`` and ``add_generation_prompt`` (salvage). Tools,
``response_format``, sampling parameters and ``logprobs`` are kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sidecar.config import ThinkingOffRule
from sidecar.core.bodies import (
    prompt_fingerprint,
    thinking_disabled,
    with_thinking_off,
)
from sidecar.core.wire import RequestFacts
from sidecar.labels import Thinking


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
