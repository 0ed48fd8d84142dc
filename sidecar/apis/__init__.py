"""The client-facing generating APIs the sidecar watches, one package each, and their
registry. ``sidecar.core.wire`` states the interface every API implements.

Every package has the same four modules, one role each: ``api.py`` (the
:class:`~sidecar.core.wire.WireApi`: reading a request, the bodies sent upstream, the
history, and ``open`` for one exchange's parts), ``attempt.py`` (an upstream attempt's
decoder), ``splice.py`` (the splicer: what the client sees of a cut) and ``fold.py`` (the
body of a non-streaming client); it has no ``__init__.py`` (a namespace package: what the
package is, ``api.py``'s docstring says). The classes are named for the package
(``MessagesApi``, ``MessagesAttempt``, ``MessagesSplicer``, ``MessagesFold``). ``openai``
has a fifth, ``chunks.py``: its chunk decoder, which with the attempt would pass the
450-line bound.

An API that streams SSE named events builds on ``sse_events.py`` (its attempt, splicer,
fold and bodies; ``templates.py`` for the learned delta events), so that only its tables
and what is its own are left to write.

Adding an API is one new folder of those four modules, and one entry in :data:`REGISTRY`
(with its import): the app registers a route for each entry. Its requests are counted
under a ``route`` label of ``sidecar.labels.WatchedRoute``; a family of requests none of
those names would add one word there.
"""

from __future__ import annotations

from sidecar.apis.messages.api import MESSAGES
from sidecar.apis.ollama.api import OLLAMA_CHAT, OLLAMA_GENERATE
from sidecar.apis.openai.api import CHAT, COMPLETIONS
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
