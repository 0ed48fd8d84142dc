"""OpenAI chat completions, ``POST /v1/chat/completions`` (pure).

Reasoning arrives in ``delta.reasoning`` (vLLM), ``delta.reasoning_content`` (llama.cpp,
SGLang) or between inline ``<think>`` tags in ``delta.content``; the answer in
``delta.content``. ``include_reasoning: false`` is honoured by asking for the reasoning
anyway (it must be watched) and removing it from what the client gets. Chat is the one API
with a ``salvage`` step: the request continues from its own reasoning, closed.

History: clients that send an earlier turn's reasoning back (``reasoning`` or
``reasoning_content`` on an assistant message) get the reasoning the sidecar cut replaced
by a short note; it is recognized by its length and first characters
(``sidecar.core.attempt.reasoning_mark``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sidecar.apis.openai.chunk_api import ChunkApi
from sidecar.core.attempt import text_mark
from sidecar.core.wire import CUT_NOTE

#: The fields of an assistant message in which clients send reasoning back.
_REASONING_FIELDS = ("reasoning", "reasoning_content")


class ChatCompletions(ChunkApi):
    """``POST /v1/chat/completions``."""

    name = "openai.chat"
    route = "chat"
    path = "/v1/chat/completions"
    kind = "chat"

    def history_marks(self, body: Mapping[str, Any]) -> list[str]:
        """The marks of the reasoning assistant messages carry back."""
        return [text_mark(text) for text in _history_reasoning(body)]

    def clean_history(self, body: Mapping[str, Any], cut: set[str]) -> dict[str, Any]:
        out = dict(body)
        messages = body.get("messages")
        if isinstance(messages, list):
            out["messages"] = [_cleaned(m, cut) for m in messages]
        return out


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


CHAT = ChatCompletions()
