"""Ollama's native API, ``/api/chat`` and ``/api/generate``: NDJSON streams, one JSON
object per line, ``done: true`` on the last. ``chat`` and ``generate`` are the two APIs;
the line model, the attempt, the splicer, the fold and the request bodies are shared."""
