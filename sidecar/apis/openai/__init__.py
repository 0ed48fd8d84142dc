"""OpenAI's chat completions and completions: SSE streams of JSON chunks (``data:``
lines, ``[DONE]`` at the end). ``api.py`` is the API class and its two instances
(request facts, bodies, history), ``chunks.py`` the chunk decoder, ``attempt.py`` the
attempt, ``splice.py`` the splicer and ``fold.py`` the non-streaming body; all shared by
both APIs."""
