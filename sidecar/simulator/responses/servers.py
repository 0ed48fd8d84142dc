"""OpenAI Responses API encoders of the other simulated servers (vLLM's is in
:mod:`.vllm`, the state machine they share in :mod:`.stream`). Pure.

- :class:`LlamaCppResponses` (``llama-server``): **verified against real bytes**
  (``tests/data/captures/llama.cpp-agent-apis``) for a reasoning stream, a text stream and
  a non-streaming reasoning body: no ``sequence_number`` or ``output_index``, ``type``
  first, no content-part events for reasoning, ``status: "completed"`` even at the
  length cap, ``timings`` after the response (values measured by the simulator),
  ``resp_``/``rs_``/``msg_`` + 32 letters and digits. ⚠ Not captured: reasoning then text,
  the non-streaming message item, errors.
- :class:`OllamaResponses`: ⚠ **documentation only** (Ollama ``openai/responses.go`` at
  ``017eb8ae``, read, not run): reasoning as ``response.reasoning_summary_text.delta``
  with ``summary_index: 0``, the final reasoning item's text in ``summary[0].text`` and in
  ``encrypted_content``, ``reasoning_tokens`` always 0, status always ``completed``, Go
  maps (sorted keys) for events and structs for the non-streaming body.
- SGLang is not served: its Responses endpoint exists (adapted from vLLM's) but its wire
  format is neither documented nor captured, so the simulator does not invent one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from sidecar.simulator.common import gojson
from sidecar.simulator.common.draw import Draw
from sidecar.simulator.common.sse import sse
from sidecar.simulator.engine.job import Timings
from sidecar.simulator.responses.stream import (
    Event,
    Item,
    ResponseHead,
    ResponsesWire,
    ResponseUsage,
)
from sidecar.simulator.responses.vllm import VllmResponses


def _per(total: float, count: int) -> tuple[float, float]:
    """Milliseconds per token and tokens per second, as llama.cpp reports them."""
    if count <= 0 or total <= 0:
        return 0.0, 0.0
    return total / count, 1000.0 * count / total


class LlamaCppResponses(ResponsesWire):
    """llama.cpp ``llama-server`` (verified in part; see the module docstring)."""

    stream_headers = {"Server": "llama.cpp", "Access-Control-Allow-Origin": "",  # noqa: RUF012
                      "X-Accel-Buffering": "no", "Content-Type": "text/event-stream"}
    json_headers = {"Server": "llama.cpp", "Access-Control-Allow-Origin": "",  # noqa: RUF012
                    "Content-Type": "application/json; charset=utf-8"}

    def response_id(self, draw: Draw, request_id: str | None) -> str:
        return f"resp_{draw.alnum(32)}"

    def item_id(self, kind: str, draw: Draw) -> str:
        return f"{'rs' if kind == 'reasoning' else 'msg'}_{draw.alnum(32)}"

    def frame(self, name: str, payload: dict[str, Any], sequence: int) -> bytes:
        return sse(name, orjson.dumps({"type": name, **payload}))

    def created(self, head: ResponseHead) -> list[Event]:
        start = {"id": head.id, "object": "response", "status": "in_progress"}
        return [("response.created", {"response": start}),
                ("response.in_progress", {"response": start})]

    def opened(self, item: Item) -> list[Event]:
        if item.kind == "reasoning":
            return [("response.output_item.added", {"item": {
                "id": item.id, "summary": [], "type": "reasoning", "content": [],
                "encrypted_content": "", "status": "in_progress"}})]
        return [
            ("response.output_item.added", {"item": {
                "content": [], "id": item.id, "role": "assistant", "status": "in_progress",
                "type": "message"}}),
            ("response.content_part.added", {"item_id": item.id, "part": {
                "type": "output_text", "text": ""}}),
        ]

    def delta(self, item: Item, text: str) -> list[Event]:
        if item.kind == "reasoning":
            return [("response.reasoning_text.delta", {"delta": text, "item_id": item.id})]
        return [("response.output_text.delta", {"item_id": item.id, "delta": text})]

    @staticmethod
    def _message(item_id: str, text: str) -> dict[str, Any]:
        return {"type": "message", "status": "completed", "id": item_id, "content": [{
            "type": "output_text", "annotations": [], "logprobs": [], "text": text}],
            "role": "assistant"}

    def closed(self, item: Item) -> tuple[list[Event], dict[str, Any]]:
        if item.kind == "reasoning":
            done = {"id": item.id, "summary": [], "type": "reasoning",
                    "content": [{"text": item.text, "type": "reasoning_text"}],
                    "encrypted_content": ""}
            return [("response.output_item.done", {"item": done})], done
        part = {"type": "output_text", "annotations": [], "logprobs": [], "text": item.text}
        done = self._message(item.id, item.text)
        return [("response.output_text.done", {"item_id": item.id, "text": item.text}),
                ("response.content_part.done", {"item_id": item.id, "part": part}),
                ("response.output_item.done", {"item": done})], done

    @staticmethod
    def _usage(usage: ResponseUsage) -> dict[str, Any]:
        return {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
                "total_tokens": usage.input_tokens + usage.output_tokens,
                "input_tokens_details": {"cached_tokens": 0}}

    def completed(self, head: ResponseHead, finish_reason: str | None,
                  output: list[dict[str, Any]], usage: ResponseUsage,
                  timings: Timings, now: int) -> list[Event]:
        prompt_each, prompt_rate = _per(timings.prompt_ms, usage.input_tokens)
        predicted_each, predicted_rate = _per(timings.predicted_ms, usage.output_tokens)
        final = {"id": head.id, "object": "response", "created_at": now,
                 "status": "completed", "model": head.model, "output": output,
                 "usage": self._usage(usage)}
        return [("response.completed", {"response": final, "timings": {
            "cache_n": 0, "prompt_n": usage.input_tokens, "prompt_ms": timings.prompt_ms,
            "prompt_per_token_ms": prompt_each, "prompt_per_second": prompt_rate,
            "predicted_n": usage.output_tokens, "predicted_ms": timings.predicted_ms,
            "predicted_per_token_ms": predicted_each, "predicted_per_second": predicted_rate,
        }})]

    def body(self, head: ResponseHead, finish_reason: str | None, reasoning: str | None,
             content: str | None, usage: ResponseUsage, draw: Draw, now: int) -> bytes:
        output: list[dict[str, Any]] = []
        if reasoning:
            output.append({"id": self.item_id("reasoning", draw), "summary": [],
                           "type": "reasoning",
                           "content": [{"text": reasoning, "type": "reasoning_text"}],
                           "encrypted_content": "", "status": "completed"})
        if content:
            output.append(self._message(self.item_id("message", draw), content))
        return orjson.dumps({
            "completed_at": now, "created_at": head.created_at, "id": head.id,
            "model": head.model, "object": "response", "output": output,
            "status": "completed", "usage": self._usage(usage)})

    def error_body(self, status: int, err_type: str, message: str,
                   param: str | None) -> bytes:
        kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "server_error")
        return orjson.dumps({"error": {"code": status, "message": message, "type": kind}})


# ---------------------------------------------------------------------------- Ollama


class OllamaResponses(ResponsesWire):
    """Ollama (⚠ documentation only; see the module docstring)."""

    stream_headers = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}  # noqa: RUF012
    json_headers = {"Content-Type": "application/json; charset=utf-8"}  # noqa: RUF012

    def response_id(self, draw: Draw, request_id: str | None) -> str:
        return f"resp_{draw.number(999999)}"

    def item_id(self, kind: str, draw: Draw) -> str:
        return f"{'rs' if kind == 'reasoning' else 'msg'}_{draw.number(999999)}"

    def frame(self, name: str, payload: dict[str, Any], sequence: int) -> bytes:
        event = {**payload, "type": name, "sequence_number": sequence}
        return sse(name, gojson.marshal(event, sort_keys=True))

    @staticmethod
    def _reasoning(request: Mapping[str, Any]) -> dict[str, Any] | None:
        raw = request.get("reasoning")
        if not isinstance(raw, Mapping) or not (raw.get("effort") or raw.get("summary")):
            return None
        return {"effort": raw.get("effort") or None, "summary": raw.get("summary") or None}

    def response(self, head: ResponseHead, status: str, output: list[dict[str, Any]],
                 usage: dict[str, Any] | None, now: int,
                 completed_at: int | None) -> dict[str, Any]:
        r = head.request
        tools = [{"type": t.get("type"), "name": t.get("name"),
                  "description": t.get("description"), "strict": t.get("strict"),
                  "parameters": t.get("parameters")}
                 for t in r.get("tools") or [] if isinstance(t, Mapping)]
        return {
            "id": head.id, "object": "response", "created_at": now,
            "completed_at": completed_at, "status": status, "incomplete_details": None,
            "model": head.model, "previous_response_id": None,
            "instructions": r.get("instructions") or None, "output": output, "error": None,
            "tools": tools, "tool_choice": "auto", "truncation": r.get("truncation") or "disabled",
            "parallel_tool_calls": True, "text": {"format": {"type": "text"}},
            "top_p": 1.0 if r.get("top_p") is None else r.get("top_p"),
            "presence_penalty": 0, "frequency_penalty": 0, "top_logprobs": 0,
            "temperature": 1.0 if r.get("temperature") is None else r.get("temperature"),
            "reasoning": self._reasoning(r), "usage": usage,
            "max_output_tokens": r.get("max_output_tokens"), "max_tool_calls": None,
            "store": False, "background": bool(r.get("background")), "service_tier": "default",
            "metadata": {}, "safety_identifier": None, "prompt_cache_key": None,
        }

    def created(self, head: ResponseHead) -> list[Event]:
        start = self.response(head, "in_progress", [], None, head.created_at, None)
        return [("response.created", {"response": start}),
                ("response.in_progress", {"response": start})]

    def opened(self, item: Item) -> list[Event]:
        if item.kind == "reasoning":
            return [("response.output_item.added", {"output_index": item.index, "item": {
                "id": item.id, "type": "reasoning", "summary": []}})]
        return [
            ("response.output_item.added", {"output_index": item.index, "item": {
                "id": item.id, "type": "message", "status": "in_progress",
                "role": "assistant", "content": []}}),
            ("response.content_part.added", {
                "item_id": item.id, "output_index": item.index, "content_index": 0,
                "part": {"type": "output_text", "text": "", "annotations": [],
                         "logprobs": []}}),
        ]

    def delta(self, item: Item, text: str) -> list[Event]:
        if item.kind == "reasoning":
            return [("response.reasoning_summary_text.delta", {
                "item_id": item.id, "output_index": item.index, "summary_index": 0,
                "delta": text})]
        return [("response.output_text.delta", {
            "item_id": item.id, "output_index": item.index, "content_index": 0,
            "delta": text, "logprobs": []})]

    def closed(self, item: Item) -> tuple[list[Event], dict[str, Any]]:
        if item.kind == "reasoning":
            done = {"id": item.id, "type": "reasoning",
                    "summary": [{"type": "summary_text", "text": item.text}],
                    "encrypted_content": item.text}
            return [("response.reasoning_summary_text.done", {
                "item_id": item.id, "output_index": item.index, "summary_index": 0,
                "text": item.text}),
                ("response.output_item.done", {"output_index": item.index, "item": done})
            ], done
        part = {"type": "output_text", "text": item.text, "annotations": [], "logprobs": []}
        done = {"id": item.id, "type": "message", "status": "completed", "role": "assistant",
                "content": [part]}
        where = {"item_id": item.id, "output_index": item.index, "content_index": 0}
        return [("response.output_text.done", {**where, "text": item.text, "logprobs": []}),
                ("response.content_part.done", {**where, "part": part}),
                ("response.output_item.done", {"output_index": item.index, "item": done})
                ], done

    def completed(self, head: ResponseHead, finish_reason: str | None,
                  output: list[dict[str, Any]], usage: ResponseUsage,
                  timings: Timings, now: int) -> list[Event]:
        counts = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
                  "total_tokens": usage.input_tokens + usage.output_tokens,
                  "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 0}}
        final = self.response(head, "completed", output, counts, now, now)
        return [("response.completed", {"response": final})]

    def body(self, head: ResponseHead, finish_reason: str | None, reasoning: str | None,
             content: str | None, usage: ResponseUsage, draw: Draw, now: int) -> bytes:
        output: list[dict[str, Any]] = []
        if reasoning:
            output.append({"id": f"rs_{head.id}", "type": "reasoning",
                           "summary": [{"type": "summary_text", "text": reasoning}],
                           "encrypted_content": reasoning})
        output.append({"id": self.item_id("message", draw), "type": "message",
                       "status": "completed", "role": "assistant", "content": [{
                           "type": "output_text", "text": content or "", "annotations": [],
                           "logprobs": []}]})
        counts = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
                  "total_tokens": usage.input_tokens + usage.output_tokens,
                  "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 0}}
        whole = self.response(head, "completed", output, counts, head.created_at, now)
        if whole["reasoning"] is not None:  # a struct with omitempty fields here
            whole["reasoning"] = {k: v for k, v in whole["reasoning"].items() if v}
        return gojson.encode(whole)

    def error_body(self, status: int, err_type: str, message: str,
                   param: str | None) -> bytes:
        kind = "invalid_request_error" if status < 500 else "api_error"
        return gojson.marshal({"error": {"message": message, "type": kind, "param": None,
                                         "code": None}})


RESPONSES_WIRES: dict[str, type[ResponsesWire]] = {
    "vllm": VllmResponses, "llamacpp": LlamaCppResponses, "ollama": OllamaResponses,
}
