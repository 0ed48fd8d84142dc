"""Ollama's native generate, ``POST /api/generate`` (pure): thinking in ``thinking``, the
answer in ``response``; the same thinking switch as ``/api/chat``."""

from __future__ import annotations

from sidecar.apis.ollama.line_api import LineApi


class OllamaGenerate(LineApi):
    """``POST /api/generate``."""

    name = "ollama.generate"
    route = "completions"
    path = "/api/generate"
    kind = "generate"


OLLAMA_GENERATE = OllamaGenerate()
