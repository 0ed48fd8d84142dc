"""Ollama's native API on the wire: the NDJSON lines and JSON bodies of ``/api/chat``,
``/api/generate``, ``/api/version`` and ``/api/tags``, shaped as ``docs/protocols.md`` §8
(Ollama ``fb307609``, ``server/routes.go``). Pure: values in, objects or bytes out; the
clock readings are passed in.

- Streaming (the default): one JSON object per ``\\n``; thinking in ``message.thinking``
  (chat) or ``thinking`` (generate); the last line has ``done: true``, ``done_reason`` and
  the counters and durations.
- ``"stream": false``: one JSON object with the whole message.
- Errors before output: ``{"error": "…"}``; after output has started (fault
  ``error-mid-stream``): :data:`MID_STREAM_ERROR`, then the stream ends.

⚠ Not in the document, so a reading of the source rather than a checked capture: the
``/api/version`` and ``/api/tags`` bodies, the error message wording, the ``context`` of
generate's last line (here: the prompt's token ids) and the exact durations.
"""

from __future__ import annotations

import zlib
from datetime import UTC, datetime
from typing import Any

import orjson

from sidecar.simulator.engine.generation import Token
from sidecar.simulator.engine.tokenizer import token_id, tokenize

OLLAMA_VERSION = "0.33.0-rc2"
NDJSON_HEADERS = {"Content-Type": "application/x-ndjson"}
JSON_HEADERS = {"Content-Type": "application/json; charset=utf-8"}
MID_STREAM_ERROR = (b'{"error":"an error was encountered while running '
                    b'the model: unexpected EOF"}\n')
_LOAD_NS = 1_334_875  # a warm model: load time is small and constant


def created_at(ns: int) -> str:
    """``time.Time`` as Go marshals it (RFC 3339, nanoseconds without trailing zeros)."""
    sec, frac = divmod(ns, 1_000_000_000)
    base = datetime.fromtimestamp(sec, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    digits = f"{frac:09d}".rstrip("0")
    return f"{base}.{digits}Z" if digits else f"{base}Z"


def error_body(message: str) -> bytes:
    """An error answered before any output."""
    return orjson.dumps({"error": message})


def line(model: str, *, chat: bool, now_ns: int, thinking: str, content: str,
         ) -> dict[str, Any]:
    """One line of output (``done`` not yet set)."""
    head: dict[str, Any] = {"model": model, "created_at": created_at(now_ns)}
    if chat:
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if thinking:
            message["thinking"] = thinking
        head["message"] = message
    else:
        head["response"] = content
        if thinking:
            head["thinking"] = thinking
    return head


def final(model: str, last: Token, *, chat: bool, now_ns: int, elapsed_ns: int,
          prompt: str, prompt_tokens: int, thinking: str = "", content: str = "",
          ) -> dict[str, Any]:
    """The last line (or the whole non-streaming body): ``done``, its reason, the counters
    and the durations (``elapsed_ns`` since the request started)."""
    out = line(model, chat=chat, now_ns=now_ns, thinking=thinking, content=content)
    out["done"] = True
    out["done_reason"] = "stop" if last.finish_reason == "stop" else "length"
    if not chat:
        out["context"] = [token_id(t) for t in tokenize(prompt)]
    prompt_ns = 1_000 * prompt_tokens
    out.update(total_duration=elapsed_ns + _LOAD_NS, load_duration=_LOAD_NS,
               prompt_eval_count=prompt_tokens, prompt_eval_duration=prompt_ns,
               eval_count=last.completion_tokens,
               eval_duration=max(1, elapsed_ns - prompt_ns))
    return out


def version_body() -> bytes:
    """``GET /api/version``."""
    return orjson.dumps({"version": OLLAMA_VERSION})


def tags_body(names: tuple[str, ...], now_ns: int) -> bytes:
    """``GET /api/tags``: the simulated models, as Ollama lists pulled models."""
    stamp = created_at(now_ns)
    models = [{"name": name, "model": name, "modified_at": stamp, "size": 0,
               "digest": f"{zlib.crc32(name.encode()):08x}" * 8,
               "details": {"parent_model": "", "format": "gguf", "family": "qwen3",
                           "families": ["qwen3"], "parameter_size": "0.6B",
                           "quantization_level": "Q4_K_M"}}
              for name in names]
    return orjson.dumps({"models": models})
