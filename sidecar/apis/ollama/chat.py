"""Ollama's native chat, ``POST /api/chat`` (pure): thinking in ``message.thinking``,
the answer in ``message.content``; ``think: false`` turns thinking off (``"low"`` for
gpt-oss, which accepts levels only)."""

from __future__ import annotations

from sidecar.apis.ollama.line_api import LineApi


class OllamaChat(LineApi):
    """``POST /api/chat``."""

    name = "ollama.chat"
    route = "chat"
    path = "/api/chat"
    kind = "chat"


OLLAMA_CHAT = OllamaChat()
