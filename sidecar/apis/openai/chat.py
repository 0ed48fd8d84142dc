"""OpenAI chat completions, ``POST /v1/chat/completions`` (pure).

Reasoning arrives in ``delta.reasoning`` (vLLM), ``delta.reasoning_content`` (llama.cpp,
SGLang) or between inline ``<think>`` tags in ``delta.content``; the answer in
``delta.content``. ``include_reasoning: false`` is honoured by asking for the reasoning
anyway (it must be watched) and removing it from what the client gets. Chat is the one API
with a ``salvage`` step: the request continues from its own reasoning, closed.
"""

from __future__ import annotations

from sidecar.apis.openai.chunk_api import ChunkApi


class ChatCompletions(ChunkApi):
    """``POST /v1/chat/completions``."""

    name = "openai.chat"
    route = "chat"
    path = "/v1/chat/completions"
    kind = "chat"


CHAT = ChatCompletions()
