"""Anthropic's Messages API, ``POST /v1/messages`` (Claude Code): SSE with named events,
one message of content blocks (``thinking``, ``text``, ``tool_use``) streamed as
``content_block_start``/``_delta``/``_stop`` between one ``message_start`` and one
``message_stop``. ``api.py`` is the API (request facts, bodies, history), ``attempt.py``
the stream decoder, ``splice.py`` the splicer and ``fold.py`` the non-streaming body."""
