"""vLLM 0.32.0's Responses API (``/v1/responses``) on the wire. Pure.

:class:`VllmResponses` is **verified against real bytes**
(``tests/data/captures/vllm-0.32.0-agent-apis`` and ``…-agent-apis-recorded``):
``created`` and ``in_progress`` first, event keys in the openai models' (alphabetical)
order with ``type`` last, ``sequence_number`` from 0 over every event, every null written,
a reasoning item closed before the message opens at the next ``output_index``, the
reasoning item ``status: null`` in a non-streaming body, ``include_reasoning: false``
(no reasoning item, tokens still counted), ``length`` → ``status: "incomplete"`` with
``incomplete_details.reason: "max_output_tokens"`` under a ``response.completed`` event.
⚠ From vLLM's source only: the echo of function tools (openai 3.63's ``FunctionTool``
fields) and of ``text``.
"""

from __future__ import annotations

from typing import Any

import orjson

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


def _vllm_usage(usage: ResponseUsage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0,
                                 "input_tokens_per_turn": [], "cached_tokens_per_turn": []},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens,
                                  "tool_output_tokens": 0, "output_tokens_per_turn": [],
                                  "tool_output_tokens_per_turn": []},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


class VllmResponses(ResponsesWire):
    """vLLM 0.32.0 (verified; see the module docstring)."""

    stream_headers = {"server": "uvicorn", "content-type": "text/event-stream; charset=utf-8",  # noqa: RUF012
                      "vary": "Origin"}
    json_headers = {"server": "uvicorn", "content-type": "application/json",  # noqa: RUF012
                    "vary": "Origin"}
    aborts_on_error = True

    def response_id(self, draw: Draw, request_id: str | None) -> str:
        return request_id if request_id is not None else f"resp_{draw.hex(16)}"

    def item_id(self, kind: str, draw: Draw) -> str:
        return f"{'rs' if kind == 'reasoning' else 'msg'}_{draw.hex(16)}"

    def frame(self, name: str, payload: dict[str, Any], sequence: int) -> bytes:
        # The openai event models list their fields alphabetically; ``type`` sorts last.
        event = dict(sorted({**payload, "sequence_number": sequence, "type": name}.items()))
        return sse(name, orjson.dumps(event))

    def response(self, head: ResponseHead, status: str, output: list[dict[str, Any]],
                 usage: ResponseUsage | None) -> dict[str, Any]:
        """The response object in ``ResponsesResponse``'s field order."""
        e = head.echo
        return {
            "id": head.id, "created_at": head.created_at,
            "incomplete_details": {"reason": "max_output_tokens"}
            if status == "incomplete" else None,
            "instructions": e.get("instructions"), "metadata": e.get("metadata"),
            "model": head.model, "object": "response", "output": output,
            "parallel_tool_calls": e.get("parallel_tool_calls", True),
            "temperature": e.get("temperature", 1.0), "tool_choice": e.get("tool_choice", "none"),
            "tools": e.get("tools", []), "top_p": e.get("top_p", 1.0),
            "background": e.get("background", False),
            "max_output_tokens": e.get("max_output_tokens"),
            "max_tool_calls": e.get("max_tool_calls"), "previous_response_id": None,
            "prompt": None, "reasoning": e.get("reasoning"),
            "service_tier": e.get("service_tier", "auto"), "status": status,
            "text": e.get("text"), "top_logprobs": e.get("top_logprobs"),
            "truncation": e.get("truncation", "disabled"),
            "usage": None if usage is None else _vllm_usage(usage), "user": e.get("user"),
            "presence_penalty": e.get("presence_penalty", 0.0),
            "frequency_penalty": e.get("frequency_penalty", 0.0),
            "kv_transfer_params": None, "ec_transfer_params": None,
            "input_messages": None, "output_messages": None,
        }

    def created(self, head: ResponseHead) -> list[Event]:
        start = self.response(head, "in_progress", [], None)
        return [("response.created", {"response": start}),
                ("response.in_progress", {"response": start})]

    def opened(self, item: Item) -> list[Event]:
        where = {"item_id": item.id, "output_index": item.index, "content_index": 0}
        if item.kind == "reasoning":
            return [
                ("response.output_item.added", {"item": {
                    "id": item.id, "summary": [], "type": "reasoning", "content": None,
                    "encrypted_content": None, "status": "in_progress"},
                    "output_index": item.index}),
                ("response.content_part.added",
                 {**where, "part": {"text": "", "type": "reasoning_text"}}),
            ]
        return [
            ("response.output_item.added", {"item": {
                "id": item.id, "content": [], "role": "assistant", "status": "in_progress",
                "type": "message", "phase": None}, "output_index": item.index}),
            ("response.content_part.added", {**where, "part": {
                "annotations": [], "text": "", "type": "output_text", "logprobs": []}}),
        ]

    def delta(self, item: Item, text: str) -> list[Event]:
        where = {"item_id": item.id, "output_index": item.index, "content_index": 0}
        if item.kind == "reasoning":
            return [("response.reasoning_text.delta", {**where, "delta": text})]
        return [("response.output_text.delta", {**where, "delta": text, "logprobs": []})]

    def closed(self, item: Item) -> tuple[list[Event], dict[str, Any]]:
        where = {"item_id": item.id, "output_index": item.index, "content_index": 0}
        if item.kind == "reasoning":
            part: dict[str, Any] = {"text": item.text, "type": "reasoning_text"}
            done = {"id": item.id, "summary": [], "type": "reasoning", "content": [part],
                    "encrypted_content": None, "status": "completed"}
            return [("response.reasoning_text.done", {**where, "text": item.text}),
                    ("response.content_part.done", {**where, "part": part}),
                    ("response.output_item.done", {"item": done, "output_index": item.index})
                    ], done
        part = {"annotations": [], "text": item.text, "type": "output_text", "logprobs": None}
        done = {"id": item.id, "content": [part] if item.text else [], "role": "assistant",
                "status": "completed", "type": "message", "phase": None}
        return [("response.output_text.done", {**where, "text": item.text, "logprobs": []}),
                ("response.content_part.done", {**where, "part": part}),
                ("response.output_item.done", {"item": done, "output_index": item.index})
                ], done

    @staticmethod
    def _status(finish_reason: str | None) -> str:
        return "incomplete" if finish_reason == "length" else "completed"

    def completed(self, head: ResponseHead, finish_reason: str | None,
                  output: list[dict[str, Any]], usage: ResponseUsage,
                  timings: Timings, now: int) -> list[Event]:
        final = self.response(head, self._status(finish_reason), output, usage)
        return [("response.completed", {"response": final})]

    def body(self, head: ResponseHead, finish_reason: str | None, reasoning: str | None,
             content: str | None, usage: ResponseUsage, draw: Draw, now: int) -> bytes:
        output: list[dict[str, Any]] = []
        if reasoning:
            output.append({"id": self.item_id("reasoning", draw), "summary": [],
                           "type": "reasoning",
                           "content": [{"text": reasoning, "type": "reasoning_text"}],
                           "encrypted_content": None, "status": None})
        if content:
            output.append({"id": self.item_id("message", draw), "content": [{
                "annotations": [], "text": content, "type": "output_text", "logprobs": None}],
                "role": "assistant", "status": "completed", "type": "message", "phase": None})
        return orjson.dumps(self.response(head, self._status(finish_reason), output, usage))

    def error_body(self, status: int, err_type: str, message: str,
                   param: str | None) -> bytes:
        return orjson.dumps({"error": {"message": message, "type": err_type, "param": param,
                                       "code": status}})
