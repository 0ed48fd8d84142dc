"""Ollama's native API on the simulated node: ``/api/chat``, ``/api/generate`` (NDJSON),
``/api/version`` and ``/api/tags``, shaped as ``docs/protocols.md`` §8 (Ollama
``fb307609``, ``server/routes.go``).

- Streaming (the default, ``"stream": true``): ``application/x-ndjson``, one JSON object
  per ``\\n``; thinking in ``message.thinking`` (chat) or ``thinking`` (generate); the last
  line has ``done: true``, ``done_reason`` and the counters and durations.
- ``"stream": false``: one JSON object with the whole message.
- ``think``: a boolean or a level; unset means on for thinking models (all ``sim-*``).
- Errors before output: the HTTP status with ``{"error": "…"}``; after output has started
  (fault ``error-mid-stream``): an extra ``{"error": "…"}`` line, then the stream ends.

⚠ Not in the document, so a reading of the source rather than a checked capture: the
``/api/version`` and ``/api/tags`` bodies, the error message wording, the ``context`` of
generate's last line (here: the prompt's token ids) and the exact durations.
"""

from __future__ import annotations

import time
import zlib
from datetime import UTC, datetime
from typing import Any

import orjson
from aiohttp import web

from sidecar.simulator.common.errors import ApiError, ClientGoneError
from sidecar.simulator.engine.faults import FaultHeaderError, FaultKind, parse_fault
from sidecar.simulator.engine.generation import Channel, Token, generate
from sidecar.simulator.engine.job import Job
from sidecar.simulator.engine.tokenizer import token_id, tokenize
from sidecar.simulator.node.metrics import Accounting
from sidecar.simulator.node.pacing import Pacer
from sidecar.simulator.node.state import NODE_KEY
from sidecar.simulator.requests import parse_chat

OLLAMA_VERSION = "0.33.0-rc2"
NDJSON_HEADERS = {"Content-Type": "application/x-ndjson"}
JSON_HEADERS = {"Content-Type": "application/json; charset=utf-8"}
_LOAD_NS = 1_334_875  # a warm model: load time is small and constant


def created_at(ns: int) -> str:
    """``time.Time`` as Go marshals it (RFC 3339, nanoseconds without trailing zeros)."""
    sec, frac = divmod(ns, 1_000_000_000)
    base = datetime.fromtimestamp(sec, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    digits = f"{frac:09d}".rstrip("0")
    return f"{base}.{digits}Z" if digits else f"{base}Z"


def _error(status: int, message: str) -> web.Response:
    return web.Response(status=status, body=orjson.dumps({"error": message}),
                        headers=JSON_HEADERS)


def internal_body(body: dict[str, Any], *, chat: bool) -> dict[str, Any]:
    """The native request as the shared (vLLM-shaped) validator reads it."""
    think = body.get("think")
    options = body.get("options") if isinstance(body.get("options"), dict) else {}
    out: dict[str, Any] = {"model": body.get("model")}
    if chat:
        out["messages"] = body.get("messages")
    else:
        prompt = body.get("prompt")
        out["messages"] = [{"role": "user", "content": prompt if isinstance(prompt, str) else ""}]
    num_predict = options.get("num_predict") if isinstance(options, dict) else None
    if isinstance(num_predict, int) and not isinstance(num_predict, bool) and num_predict > 0:
        out["max_tokens"] = num_predict
    out["chat_template_kwargs"] = {"enable_thinking": think is not False}
    return out


class _NativeRun:
    """One native generation request being served."""

    def __init__(self, request: web.Request, job: Job, body: dict[str, Any], *,
                 chat: bool) -> None:
        self.request = request
        self.node = request.app[NODE_KEY]
        self.job = job
        self.chat = chat
        self.model = str(body.get("model"))
        self.started = time.monotonic_ns()

    def _line(self, thinking: str, content: str) -> dict[str, Any]:
        head: dict[str, Any] = {"model": self.model, "created_at": created_at(time.time_ns())}
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if thinking:
                message["thinking"] = thinking
            head["message"] = message
        else:
            head["response"] = content
            if thinking:
                head["thinking"] = thinking
        return head

    def _final(self, last: Token, thinking: str = "", content: str = "") -> dict[str, Any]:
        out = self._line(thinking, content)
        out["done"] = True
        out["done_reason"] = "stop" if last.finish_reason == "stop" else "length"
        if not self.chat:
            out["context"] = [token_id(t) for t in tokenize(self.job.prompt)]
        total = time.monotonic_ns() - self.started
        prompt_ns = 1_000 * self.job.prompt_tokens
        out.update(total_duration=total + _LOAD_NS, load_duration=_LOAD_NS,
                   prompt_eval_count=self.job.prompt_tokens, prompt_eval_duration=prompt_ns,
                   eval_count=last.completion_tokens,
                   eval_duration=max(1, total - prompt_ns))
        return out

    def _tokens(self) -> Any:
        script = self.node.behaviours.script(self.job.model, key=self.job.prompt, choice=0)
        return generate(script, self.job.spec)

    async def stream(self, error_after: int | None) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers=NDJSON_HEADERS)
        resp.enable_chunked_encoding()
        await resp.prepare(self.request)
        pacer = Pacer(self.request, self.node.config.tokens_per_second)
        accounting = Accounting(self.node.metrics, self.job.model)
        accounting.start(self.job)
        sent = 0
        gone = False
        try:
            for token in self._tokens():
                accounting.token(token)
                if token.channel is not Channel.SPECIAL:
                    reasoning = token.channel is Channel.REASONING
                    line = self._line(token.text if reasoning else "",
                                      "" if reasoning else token.text)
                    line["done"] = False
                    await resp.write(orjson.dumps(line) + b"\n")
                    sent += 1
                    if error_after is not None and sent >= error_after:
                        accounting.fail()
                        await resp.write(b'{"error":"an error was encountered while running '
                                         b'the model: unexpected EOF"}\n')
                        await resp.write_eof()
                        return resp
                if token.finish_reason is not None:
                    await resp.write(orjson.dumps(self._final(token)) + b"\n")
                    break
                await pacer.step()
            await resp.write_eof()
        except (ClientGoneError, ConnectionError):
            gone = True
        finally:
            accounting.end(disconnected=gone)
        return resp

    async def whole(self) -> web.StreamResponse:
        pacer = Pacer(self.request, self.node.config.tokens_per_second)
        accounting = Accounting(self.node.metrics, self.job.model)
        accounting.start(self.job)
        texts: dict[Channel, list[str]] = {Channel.REASONING: [], Channel.CONTENT: []}
        last: Token | None = None
        gone = False
        try:
            for token in self._tokens():
                accounting.token(token)
                last = token
                if token.channel is not Channel.SPECIAL:
                    texts[token.channel].append(token.text)
                if token.finish_reason is not None:
                    break
                await pacer.step()
        except (ClientGoneError, ConnectionError):
            gone = True
            return web.Response(status=499)
        finally:
            accounting.end(disconnected=gone)
        assert last is not None
        body = self._final(last, "".join(texts[Channel.REASONING]),
                           "".join(texts[Channel.CONTENT]))
        return web.Response(body=orjson.dumps(body), headers=JSON_HEADERS)


async def _native(request: web.Request, *, chat: bool) -> web.StreamResponse:
    node = request.app[NODE_KEY]
    try:
        fault = parse_fault(request.headers)
    except FaultHeaderError as exc:
        return _error(400, str(exc))
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        return _error(400, "invalid character in request body")
    if not isinstance(body, dict):
        return _error(400, "invalid request body")
    model = body.get("model")
    if not isinstance(model, str) or not node.behaviours.knows(model):
        return _error(404, f'model "{model}" not found, try pulling it first')
    try:
        job = parse_chat(internal_body(body, chat=chat), known=node.behaviours.names,
                         max_model_len=node.config.max_model_len)
    except ApiError as err:
        return _error(err.status, err.message)
    if fault is not None and fault.kind is FaultKind.HTTP_500:
        return _error(500, "llama runner process has terminated")
    run = _NativeRun(request, job, body, chat=chat)
    if body.get("stream", True) is False:
        return await run.whole()
    error_after = (fault.after if fault is not None and fault.kind is FaultKind.ERROR_MID_STREAM
                   else None)
    return await run.stream(error_after)


async def chat_route(request: web.Request) -> web.StreamResponse:
    """``POST /api/chat``."""
    return await _native(request, chat=True)


async def generate_route(request: web.Request) -> web.StreamResponse:
    """``POST /api/generate``."""
    return await _native(request, chat=False)


async def version_route(request: web.Request) -> web.Response:
    """``GET /api/version``."""
    return web.Response(body=orjson.dumps({"version": OLLAMA_VERSION}), headers=JSON_HEADERS)


async def tags_route(request: web.Request) -> web.Response:
    """``GET /api/tags``: the simulated models, as Ollama lists pulled models."""
    node = request.app[NODE_KEY]
    stamp = created_at(time.time_ns())
    models = [{"name": name, "model": name, "modified_at": stamp, "size": 0,
               "digest": f"{zlib.crc32(name.encode()):08x}" * 8,
               "details": {"parent_model": "", "format": "gguf", "family": "qwen3",
                           "families": ["qwen3"], "parameter_size": "0.6B",
                           "quantization_level": "Q4_K_M"}}
              for name in node.behaviours.names]
    return web.Response(body=orjson.dumps({"models": models}), headers=JSON_HEADERS)
