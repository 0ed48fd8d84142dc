"""Request-body rewriting for watched requests and their reissues (pure).

Every function returns a new dict and leaves its input alone. A reissue changes only
the documented fields: the thinking switch of the model family (``reissue.rules``),
``n`` (to the number of choices still open), ``stream``/``stream_options`` (so the
sidecar can watch a non-streaming request and count a reissue's tokens exactly), and
for the steps that need it ``model`` (fallback) or ``messages``,
``continue_final_message`` and ``add_generation_prompt`` (salvage). Tools,
``response_format``, sampling parameters and ``logprobs`` are kept.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from sidecar.config import ThinkingOffRule


def deep_merge(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``patch`` merged in: nested dicts merge, anything else is replaced."""
    out = dict(base)
    for key, value in patch.items():
        old = out.get(key)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            out[key] = deep_merge(old, value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def thinking_off_patch(model: str, rules: Sequence[ThinkingOffRule]) -> Mapping[str, Any]:
    """The body patch that disables thinking for ``model``: the first matching rule's."""
    for rule in rules:
        if re.search(rule.match, model, re.IGNORECASE):
            return rule.set
    return {"reasoning_effort": "none"}


def thinking_disabled(body: Mapping[str, Any]) -> bool:
    """Whether the client already asked for no thinking, by any of the known switches."""
    kwargs = body.get("chat_template_kwargs")
    if isinstance(kwargs, Mapping) and (
        kwargs.get("enable_thinking") is False or kwargs.get("thinking") is False
    ):
        return True
    return body.get("reasoning_effort") == "none" or body.get("think") is False


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
    target = out.get("model")
    out = deep_merge(out, thinking_off_patch(target if isinstance(target, str) else "", rules))
    if "n" in out or open_choices != 1:
        out["n"] = open_choices
    return _counted(out)


def salvage_body(
    body: Mapping[str, Any], reasoning: str, *, client_stream: bool,
) -> dict[str, Any] | None:
    """Continue a chat request from the useful part of its own reasoning, closed with
    ``</think>``, so the model answers from it. None for requests that cannot be
    continued (completions route, ``n>1``, no message list)."""
    messages = body.get("messages")
    n = body.get("n", 1)
    if not isinstance(messages, list) or (isinstance(n, int) and n > 1):
        return None
    out = watched_body(body, client_stream=client_stream)
    prefix = f"<think>\n{reasoning.strip()}\n</think>\n\n"
    out["messages"] = [*messages, {"role": "assistant", "content": prefix}]
    out["continue_final_message"] = True
    out["add_generation_prompt"] = False
    return _counted(out)


def useful_reasoning(reasoning: str, excerpt: str, max_chars: int = 8000) -> str:
    """The reasoning before the repeating unit first appeared (the loop's onset), capped
    at ``max_chars`` from its end.

    The excerpt can start anywhere in the unit (where the detector happened to fire), so
    the onset is the earliest place any stretch of the unit, read cyclically, occurs. A
    verdict without an excerpt (a budget) leaves the whole reasoning useful; an excerpt
    that cannot be found leaves none, rather than feed a loop back to the model.
    """
    unit = excerpt.strip()
    if not unit:
        return reasoning[-max_chars:]
    cyclic = unit + unit
    probe = min(32, len(unit))
    # Every rotation is tried (the excerpt is at most a couple of hundred characters and
    # this runs once per cut), so the onset is exact.
    found = [p for k in range(len(unit)) if (p := reasoning.find(cyclic[k : k + probe])) >= 0]
    return reasoning[: min(found)][-max_chars:] if found else ""


def prompt_fingerprint(body: Mapping[str, Any]) -> str:
    """A stable digest of what the model is asked (model, messages or prompt, tools);
    the runaway memory stores only this, never the prompt."""
    key = {k: body.get(k) for k in ("model", "messages", "prompt", "tools", "system")}
    digest = hashlib.blake2b(orjson.dumps(key, option=orjson.OPT_SORT_KEYS), digest_size=16)
    return digest.hexdigest()
