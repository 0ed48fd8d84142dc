"""Wire encodings of the other simulated servers: llama.cpp, SGLang, Ollama (OpenAI layer).

Pure, like :mod:`sidecar.simulator.wire`. The shapes follow ``protocols.md`` sections 7-9
(llama.cpp ``server-task.cpp``; SGLang 0.5.23 ``sse_utils.py``/``protocol.py``; Ollama
``fb307609`` ``openai/openai.go``). What the document does not show is marked ⚠ below:
those bytes are a plausible reading of the source, not checked against a live server.
The ``/v1/completions`` route keeps vLLM's layout for every dialect (⚠ not documented for
these servers); the sidecar watches it the same way.

Ollama's native NDJSON API is in :mod:`sidecar.simulator.ollama`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from sidecar.simulator.wire import ChoiceResult, StreamIdentity, Usage, Vllm032Wire

LLAMACPP_FINGERPRINT = "b7000-sim"
OLLAMA_FINGERPRINT = "fp_ollama"


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


class LlamaCppWire(Vllm032Wire):
    """llama.cpp ``llama-server`` with ``--reasoning-format deepseek``.

    Key order ``choices, created, id, model, system_fingerprint, object``; the first delta
    is ``{"role":"assistant","content":null}``; reasoning in ``reasoning_content``; the
    finish chunk has delta ``{}``; usage (with ``timings``) on a ``choices: []`` chunk; an
    in-stream error is ``{"error":{"code","message","type"}}`` and **no** ``[DONE]``."""

    eos_delta: dict[str, str] = {}  # noqa: RUF012 - the finish delta is empty here

    def _tail(self, ident: StreamIdentity, obj: str) -> dict[str, Any]:
        return {"created": ident.created, "id": ident.id, "model": ident.model,
                "system_fingerprint": LLAMACPP_FINGERPRINT, "object": obj}

    def _chunk(self, ident: StreamIdentity, choice: dict[str, Any]) -> bytes:
        return _event({"choices": [choice], **self._tail(ident, "chat.completion.chunk")})

    def done_after_error(self) -> bytes:
        return b""

    def chat_role_chunk(self, ident: StreamIdentity, index: int, usage: Usage | None) -> bytes:
        return self._chunk(ident, {"finish_reason": None, "index": index,
                                   "delta": {"role": "assistant", "content": None}})

    def chat_delta_chunk(
        self, ident: StreamIdentity, index: int, delta: dict[str, str], *,
        finish_reason: str | None, stop_reason: str | None, usage: Usage | None,
        fingerprint: str | None,
    ) -> bytes:
        if finish_reason is not None and delta:  # the finish chunk is always delta {}
            return self.chat_delta_chunk(
                ident, index, delta, finish_reason=None, stop_reason=None, usage=None,
                fingerprint=None) + self.chat_delta_chunk(
                ident, index, {}, finish_reason=finish_reason, stop_reason=stop_reason,
                usage=None, fingerprint=None)
        renamed = {("reasoning_content" if k == "reasoning" else k): v for k, v in delta.items()}
        return self._chunk(ident, {"finish_reason": finish_reason, "index": index,
                                   "delta": renamed})

    @staticmethod
    def _usage(usage: Usage) -> dict[str, Any]:
        return {"completion_tokens": usage.completion_tokens,
                "prompt_tokens": usage.prompt_tokens,
                "total_tokens": usage.prompt_tokens + usage.completion_tokens}

    @staticmethod
    def _timings(usage: Usage) -> dict[str, Any]:
        # ⚠ The document elides the timings object; these two counters are its
        # token counts as named in server-task.cpp, the durations are left out.
        return {"prompt_n": usage.prompt_tokens, "predicted_n": usage.completion_tokens}

    def chat_usage_chunk(self, ident: StreamIdentity, usage: Usage, fingerprint: str) -> bytes:
        return _event({"choices": [], **self._tail(ident, "chat.completion.chunk"),
                       "usage": self._usage(usage), "timings": self._timings(usage)})

    def chat_response(
        self, ident: StreamIdentity, choices: Sequence[ChoiceResult], usage: Usage,
        fingerprint: str,
    ) -> bytes:
        # ⚠ Non-streaming body: same field layout as the chunks, not in the document.
        body: dict[str, Any] = {"choices": [
            {"finish_reason": c.finish_reason, "index": c.index,
             "message": {"role": "assistant", "content": c.content,
                         **({"reasoning_content": c.reasoning} if c.reasoning else {})}}
            for c in choices]}
        body.update(self._tail(ident, "chat.completion"))
        body["usage"] = self._usage(usage)
        body["timings"] = self._timings(usage)
        return orjson.dumps(body)

    def error_body(self, message: str, err_type: str, param: str | None, code: int) -> bytes:
        kind = {400: "invalid_request_error", 404: "not_found_error"}.get(code, "server_error")
        return orjson.dumps({"error": {"code": code, "message": message, "type": kind}})

    def stream_error(self, message: str, err_type: str, code: int) -> bytes:
        return self.event(orjson.dumps(
            {"error": {"code": code, "message": message, "type": "server_error"}}))


class SglangWire(Vllm032Wire):
    """SGLang 0.5.23: ``reasoning_content`` is in every delta (null or a string),
    ``matched_stop`` in every choice; errors in a stream are followed by ``[DONE]``."""

    eos_delta: dict[str, str] = {}  # noqa: RUF012 - the finish delta is empty here

    @staticmethod
    def _choice(index: int, delta: dict[str, Any], finish: str | None,
                matched: int | None) -> dict[str, Any]:
        return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish,
                "matched_stop": matched}

    def chat_role_chunk(self, ident: StreamIdentity, index: int, usage: Usage | None) -> bytes:
        return self._stream_chunk(ident, "chat.completion.chunk", [self._choice(
            index, {"reasoning_content": None, "role": "assistant", "content": ""}, None, None)],
            None, None)

    def chat_delta_chunk(
        self, ident: StreamIdentity, index: int, delta: dict[str, str], *,
        finish_reason: str | None, stop_reason: str | None, usage: Usage | None,
        fingerprint: str | None,
    ) -> bytes:
        if finish_reason is not None and delta:  # the finish chunk carries no text
            return self.chat_delta_chunk(
                ident, index, delta, finish_reason=None, stop_reason=None, usage=None,
                fingerprint=None) + self.chat_delta_chunk(
                ident, index, {}, finish_reason=finish_reason, stop_reason=stop_reason,
                usage=None, fingerprint=None)
        if "reasoning" in delta:
            out: dict[str, Any] = {"reasoning_content": delta["reasoning"]}
        else:
            out = {"reasoning_content": None, **delta}
        # ⚠ matched_stop of the finish chunk: the EOS id of qwen3, as in the document.
        matched = 151645 if finish_reason == "stop" else None
        return self._stream_chunk(ident, "chat.completion.chunk",
                                  [self._choice(index, out, finish_reason, matched)], None, None)

    def chat_usage_chunk(self, ident: StreamIdentity, usage: Usage, fingerprint: str) -> bytes:
        # ⚠ The usage chunk shape is inferred from SGLang's models, not rebuilt.
        return self._stream_chunk(ident, "chat.completion.chunk", [], {
            **self._completion_usage(usage), "prompt_tokens_details": None,
            "reasoning_tokens": usage.reasoning_tokens}, None)

    def error_body(self, message: str, err_type: str, param: str | None, code: int) -> bytes:
        # ⚠ Before a stream, SGLang's ErrorResponse is not wrapped in "error".
        return orjson.dumps({"object": "error", "message": message, "type": err_type,
                             "param": param, "code": code})

    def stream_error(self, message: str, err_type: str, code: int) -> bytes:
        return self.event(orjson.dumps({"error": {"object": "error", "message": message,
                                                  "type": err_type, "param": None,
                                                  "code": code}}))


class OllamaOpenAIWire(Vllm032Wire):
    """Ollama's ``/v1/chat/completions``: reasoning in ``delta.reasoning``; no role-only
    chunk (the first delta of a choice carries ``role`` and ``content: ""``);
    ``system_fingerprint: "fp_ollama"`` on every chunk; usage on a ``choices: []`` chunk."""

    eos_delta: dict[str, str] = {}  # noqa: RUF012 - the finish delta is empty here

    role_in_first_delta = True

    def _chunk(self, ident: StreamIdentity, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": ident.id, "object": "chat.completion.chunk", "created": ident.created,
                "model": ident.model, "system_fingerprint": OLLAMA_FINGERPRINT,
                "choices": choices}

    def done_after_error(self) -> bytes:
        # ⚠ Ollama's OpenAI layer writes the error event and returns; no [DONE] follows.
        return b""

    def chat_role_chunk(self, ident: StreamIdentity, index: int, usage: Usage | None) -> bytes:
        return b""

    def chat_delta_chunk(
        self, ident: StreamIdentity, index: int, delta: dict[str, str], *,
        finish_reason: str | None, stop_reason: str | None, usage: Usage | None,
        fingerprint: str | None,
    ) -> bytes:
        if finish_reason is not None and delta:  # the finish chunk has an empty delta
            return self.chat_delta_chunk(
                ident, index, delta, finish_reason=None, stop_reason=None, usage=None,
                fingerprint=None) + self.chat_delta_chunk(
                ident, index, {}, finish_reason=finish_reason, stop_reason=stop_reason,
                usage=None, fingerprint=None)
        return _event(self._chunk(ident, [{"index": index, "delta": delta,
                                           "finish_reason": finish_reason}]))

    def chat_usage_chunk(self, ident: StreamIdentity, usage: Usage, fingerprint: str) -> bytes:
        chunk = self._chunk(ident, [])
        chunk["usage"] = {"prompt_tokens": usage.prompt_tokens,
                          "completion_tokens": usage.completion_tokens,
                          "total_tokens": usage.prompt_tokens + usage.completion_tokens}
        return _event(chunk)

    def error_body(self, message: str, err_type: str, param: str | None, code: int) -> bytes:
        # Ollama's OpenAI error: {"error":{"message","type","param","code"}} (⚠ type names).
        return orjson.dumps({"error": {"message": message, "type": "invalid_request_error"
                                       if code < 500 else "api_error", "param": None,
                                       "code": None}})


def request_body(dialect: str, body: object) -> object:
    """A request to a simulated ``dialect`` server, rewritten to the fields the shared
    (vLLM-shaped) validator reads, so each server honours its own switches only:

    - llama.cpp: ``reasoning_budget_tokens`` (alias ``thinking_budget_tokens``, -1 for
      none) is its thinking budget; vLLM's ``thinking_token_budget`` is unknown there;
    - SGLang: ``chat_template_kwargs`` and ``reasoning_effort`` as in vLLM; no budget field;
    - Ollama (OpenAI layer): ``reasoning_effort`` (or ``reasoning.effort``) ``"none"`` is
      ``think: false``; ``chat_template_kwargs`` is ignored.
    """
    if dialect == "vllm" or not isinstance(body, dict):
        return body
    out = {k: v for k, v in body.items()
           if k not in ("thinking_token_budget", "repetition_detection")}
    if dialect == "llamacpp":
        for key in ("reasoning_budget_tokens", "thinking_budget_tokens"):
            if key in out:
                out["thinking_token_budget"] = out.pop(key)
    elif dialect == "ollama":
        out.pop("chat_template_kwargs", None)
        effort = out.pop("reasoning_effort", None)
        nested = out.pop("reasoning", None)
        if isinstance(nested, dict) and effort is None:
            effort = nested.get("effort")
        if effort == "none":
            out["chat_template_kwargs"] = {"enable_thinking": False}
    return out
