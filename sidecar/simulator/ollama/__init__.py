"""Ollama's native API on the simulated node (``/api/chat``, ``/api/generate``,
``/api/version``, ``/api/tags``; NDJSON): the request (:mod:`.request`), the lines
(:mod:`.lines`) and the handlers (:mod:`.routes`). Ollama's OpenAI layer and its agent
APIs are served by the chat, completions, messages and responses folders."""
