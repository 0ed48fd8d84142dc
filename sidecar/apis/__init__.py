"""The client-facing generating APIs the sidecar watches, one module each, and their
registry. ``sidecar.core.wire`` states the interface every API implements.

Adding an API is one new module with a :class:`~sidecar.core.wire.WireApi` instance,
listed in :data:`REGISTRY`: the app registers a route for each entry, and everything
format-specific stays in the module.
"""

from __future__ import annotations

from sidecar.apis.messages.api import MESSAGES
from sidecar.apis.ollama.chat import OLLAMA_CHAT
from sidecar.apis.ollama.generate import OLLAMA_GENERATE
from sidecar.apis.openai.chat import CHAT
from sidecar.apis.openai.completions import COMPLETIONS
from sidecar.apis.responses.api import RESPONSES
from sidecar.core.wire import WireApi

#: Every watched API, in the order its route is registered.
REGISTRY: tuple[WireApi, ...] = (CHAT, COMPLETIONS, MESSAGES, RESPONSES, OLLAMA_CHAT,
                                 OLLAMA_GENERATE)


def api_for_path(path: str) -> WireApi | None:
    """The watched API whose path ``path`` is, or lies under (``/v1/messages/count_tokens``
    is Anthropic's, ``/v1/responses/{id}`` OpenAI's): whose error shape an error on that
    path takes."""
    for api in REGISTRY:
        if path == api.path or path.startswith(api.path + "/"):
            return api
    return None


__all__ = ["REGISTRY", "WireApi", "api_for_path"]
