"""``/v1/completions`` of the other simulated servers. Pure, like :mod:`.vllm`.

llama.cpp's bytes are those of a real ``llama-server`` (tests/data/captures/llama.cpp);
SGLang and Ollama keep vLLM's layout on this route (⚠ not documented for these servers;
the sidecar watches it the same way). Each server's headers and errors are in
:mod:`~sidecar.simulator.common.openai_wire`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from sidecar.simulator.common.openai_wire import (
    LLAMACPP_FINGERPRINT,
    ChoiceResult,
    StreamIdentity,
    Usage,
    llamacpp_body,
)
from sidecar.simulator.common.sse import data_event
from sidecar.simulator.completions.vllm import VllmCompletions


class LlamaCppCompletions(VllmCompletions):
    """llama.cpp ``llama-server``: chunks without usage, each choice ended on its own by a
    chunk that carries usage and timings whether or not they were asked for."""

    def chunk(
        self, ident: StreamIdentity, index: int, text: str, *, finish_reason: str | None,
        stop_reason: str | None, usage: Usage | None, fingerprint: str | None,
    ) -> bytes:
        return data_event(orjson.dumps({
            "choices": [{"text": text, "index": index, "logprobs": None,
                         "finish_reason": finish_reason}],
            "created": ident.created, "model": ident.model,
            "system_fingerprint": LLAMACPP_FINGERPRINT, "object": "text_completion",
            "id": ident.id}))

    def choice_end(self, ident: StreamIdentity, index: int, finish_reason: str,
                   usage: Usage, *, include_usage: bool) -> bytes:
        # The last chunk carries usage and timings whether or not they were asked for.
        body: dict[str, Any] = {"choices": [{"text": "", "index": index, "logprobs": None,
                                             "finish_reason": finish_reason}]}
        return data_event(llamacpp_body(body, ident, "text_completion", usage))

    def usage_chunk(self, ident: StreamIdentity, usage: Usage, fingerprint: str) -> bytes:
        raise NotImplementedError("llama.cpp sends usage per choice (choice_end)")

    def response(
        self, ident: StreamIdentity, choices: Sequence[ChoiceResult], usage: Usage,
        fingerprint: str,
    ) -> bytes:
        body: dict[str, Any] = {"choices": [
            {"text": (c.reasoning or "") + (c.content or ""), "index": c.index,
             "logprobs": None, "finish_reason": c.finish_reason} for c in choices]}
        return llamacpp_body(body, ident, "text_completion", usage)


COMPLETIONS_WIRES: Mapping[str, type[VllmCompletions]] = {
    "vllm": VllmCompletions, "llamacpp": LlamaCppCompletions, "sglang": VllmCompletions,
    "ollama": VllmCompletions,
}
