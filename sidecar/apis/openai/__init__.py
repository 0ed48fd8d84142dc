"""OpenAI's chat completions and completions: SSE streams of JSON chunks (``data:``
lines, ``[DONE]`` at the end). ``chat`` and ``completions`` are the two APIs; the chunk
decoder, the attempt, the splicer, the fold and the request bodies are shared by both."""
