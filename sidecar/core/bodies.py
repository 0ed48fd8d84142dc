"""Request-body helpers every wire API uses (pure).

Every function returns a new value and leaves its input alone. The API modules build
their own request bodies (what a first attempt or a reissue sends) from these: merging a
thinking-off patch, telling whether the client turned thinking off, the prompt's
fingerprint for the runaway memory, the useful part of a cut reasoning, the prompt's
size estimated when the upstream reported none, and the agent-loop note added to a
``messages`` history.
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


def with_thinking_off(body: Mapping[str, Any], rules: Sequence[ThinkingOffRule]) -> dict[str, Any]:
    """``body`` with the thinking-off patch of its own ``model`` merged in."""
    target = body.get("model")
    return deep_merge(body, thinking_off_patch(target if isinstance(target, str) else "", rules))


def thinking_disabled(body: Mapping[str, Any]) -> bool:
    """Whether the client already asked for no thinking, by any of the known switches."""
    kwargs = body.get("chat_template_kwargs")
    if isinstance(kwargs, Mapping) and (
        kwargs.get("enable_thinking") is False or kwargs.get("thinking") is False
    ):
        return True
    return body.get("reasoning_effort") == "none" or body.get("think") is False


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


#: Bytes of a request body per prompt token, for :func:`prompt_estimate`.
BYTES_PER_PROMPT_TOKEN = 4


def prompt_estimate(raw: bytes) -> int:
    """An estimate of the prompt tokens of the request body ``raw`` (at least 1): what an
    attempt cut before any upstream usage is billed for its prompt while no attempt of
    the exchange has reported the real size (``Totals.last_prompt``). One token per
    :data:`BYTES_PER_PROMPT_TOKEN` bytes of JSON, about what tokenizers make of English
    and code, JSON syntax and template tokens roughly even."""
    return max(1, len(raw) // BYTES_PER_PROMPT_TOKEN)


def with_user_note(body: Mapping[str, Any], note: str) -> dict[str, Any] | None:
    """``body`` with ``note`` appended to its ``messages`` as a user message, when the
    history ends with a tool result or a user turn (a system message anywhere but first is
    refused by some chat templates); None when it has no such ``messages`` list."""
    messages = body.get("messages")
    if (not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict)
            or messages[-1].get("role") not in ("tool", "user")):
        return None
    return {**body, "messages": [*messages, {"role": "user", "content": note}]}
