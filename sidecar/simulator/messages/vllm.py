"""vLLM 0.32.0's Messages API (``/v1/messages``) on the wire. Pure.

:class:`VllmMessages` is **verified against real bytes**
(``tests/data/captures/vllm-0.32.0-agent-apis`` and ``…-agent-apis-recorded``):
``exclude_unset`` events with ``index`` last, ``signature_delta`` (32 random hex) before a
thinking block closes and the text block opens at the next index,
``message_start`` usage from the first chunk, final usage in ``message_delta``; the
non-streaming body drops nulls (no ``stop_sequence``). The in-stream error (a lone
``event: error`` carrying pydantic's text) is rebuilt by running vLLM's own model on the
chat error line; an error before any text (``thinking.enabled`` without a reasoning
parser) does not occur here, since the simulated node always has one.
"""

from __future__ import annotations

from typing import Any

from sidecar.simulator.common.draw import Draw
from sidecar.simulator.messages.stream import MessagesWire, stop_reason

# vLLM 0.32.0's converter cannot parse the chat stream's error line and reports pydantic's
# text instead (rebuilt with vLLM's own ChatCompletionStreamResponse, pydantic 2.14).
_PYDANTIC_STREAM_ERROR = (
    "2 validation errors for ChatCompletionStreamResponse\nmodel\n  Field required "
    "[type=missing, input_value={'error': {'message': 'In...am': None, 'code': 500}}, "
    "input_type=dict]\n    For further information visit "
    "https://errors.pydantic.dev/2.14/v/missing\nchoices\n  Field required [type=missing, "
    "input_value={'error': {'message': 'In...am': None, 'code': 500}}, input_type=dict]\n"
    "    For further information visit https://errors.pydantic.dev/2.14/v/missing"
)

class VllmMessages(MessagesWire):
    """vLLM 0.32.0 (verified; see the module docstring)."""

    stream_headers = {"server": "uvicorn", "content-type": "text/event-stream; charset=utf-8",  # noqa: RUF012
                      "vary": "Origin"}
    json_headers = {"server": "uvicorn", "content-type": "application/json",  # noqa: RUF012
                    "vary": "Origin"}

    def message_id(self, draw: Draw, request_id: str | None) -> str:
        return f"chatcmpl-{request_id}" if request_id else f"chatcmpl-{draw.hex(16)}"

    def message_start(self, msg_id: str, model: str, input_tokens: int) -> bytes:
        return self.event("message_start", {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "content": [],
            "model": model, "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": 0}}})

    def message_delta(self, stop: str | None, input_tokens: int, output_tokens: int) -> bytes:
        return self.event("message_delta", {
            "type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens}})

    def stream_error(self) -> bytes:
        return self.event("error", {"type": "error", "error": {
            "type": "internal_error", "message": _PYDANTIC_STREAM_ERROR}})

    def body(self, msg_id: str, model: str, reasoning: str | None, content: str | None,
             finish_reason: str | None, input_tokens: int, output_tokens: int,
             draw: Draw) -> bytes:
        blocks: list[dict[str, Any]] = []
        if reasoning:
            blocks.append({"type": "thinking", "thinking": reasoning, "signature": draw.hex(32)})
        if content:
            blocks.append({"type": "text", "text": content})
        if not blocks:
            blocks.append({"type": "text", "text": ""})
        out: dict[str, Any] = {"id": msg_id, "type": "message", "role": "assistant",
                               "content": blocks, "model": model}
        stop = stop_reason(finish_reason)
        if stop is not None:
            out["stop_reason"] = stop
        out["usage"] = {"input_tokens": input_tokens, "output_tokens": output_tokens}
        return self.dumps(out)

    def error_body(self, status: int, err_type: str, message: str, draw: Draw) -> bytes:
        return self.dumps({"type": "error", "error": {"type": err_type, "message": message}})

    def validation_body(self, message: str, param: str, draw: Draw) -> bytes:
        return self.dumps({"error": {"message": message, "type": "Bad Request",
                                     "param": param, "code": 400}})

    def count_tokens_body(self, input_tokens: int) -> bytes:
        return self.dumps({"input_tokens": input_tokens,
                           "context_management": {"original_input_tokens": input_tokens}})
