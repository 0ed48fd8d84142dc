"""The simulated node: what every route shares at run time, with its I/O.

:mod:`.state` (the node's state, body reading, JSON answers), :mod:`.metrics` (vLLM's
Prometheus series and one request's bookkeeping), :mod:`.pacing` (token pace and
disconnect checks), :mod:`.plain_routes` (health, models, metrics, tokenize, embeddings,
the routes that tell servers apart), :mod:`.serving` (the node's app before its APIs,
and the loop that serves it), and the two ways a generation is served:
:mod:`.chunk_run` (OpenAI chunks, ``n`` choices) and :mod:`.event_run` (named events,
one choice).
"""
