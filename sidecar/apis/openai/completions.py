"""OpenAI completions, ``POST /v1/completions`` (pure).

The text arrives in ``choices[].text``; reasoning only as inline ``<think>`` tags in it
(a raw prompt has no reasoning parser). There is no salvage step: a prompt has no
message list to continue.
"""

from __future__ import annotations

from sidecar.apis.openai.chunk_api import ChunkApi


class Completions(ChunkApi):
    """``POST /v1/completions``."""

    name = "openai.completions"
    route = "completions"
    path = "/v1/completions"
    kind = "completions"


COMPLETIONS = Completions()
