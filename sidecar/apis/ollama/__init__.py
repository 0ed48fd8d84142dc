"""Ollama's native API, ``/api/chat`` and ``/api/generate``: NDJSON streams, one JSON
object per line, ``done: true`` on the last (``docs/protocols.md`` §8, Ollama
``fb307609``); an error after output started is one more line ``{"error": "…"}``.
``api.py`` is the API class and its two instances (request facts, bodies),
``attempt.py`` the line model and the attempt, ``splice.py`` the splicer and the lines it
writes, ``fold.py`` the non-streaming body; all shared by both APIs."""
