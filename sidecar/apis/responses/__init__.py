"""OpenAI's Responses API, ``POST /v1/responses`` (Codex, the Agents SDK): SSE with named
events, a response of output items (``reasoning``, ``message``, ``function_call``)
streamed between ``response.created`` and ``response.completed``, every event numbered
by ``sequence_number``. ``api.py`` is the API (request facts, bodies, history),
``attempt.py`` the stream decoder, ``splice.py`` the splicer and ``fold.py`` the
non-streaming body."""
