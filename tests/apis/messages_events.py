"""Anthropic Messages events for the tests, as vLLM 0.32 writes them (field order of
``tests/data/captures/vllm-0.32.0-agent-apis/messages_*.sse``), and one exchange's parts."""

from __future__ import annotations

from typing import Any

from detectors import DetectorConfig, Evidence, Verdict
from sidecar.apis.messages.api import MESSAGES
from sidecar.apis.sse_events import encode
from sidecar.core.attempt import Attempt, AttemptSpec, Totals
from sidecar.core.wire import Opened
from sidecar.dialects import DIALECTS

VERDICT = Verdict("periodic", "thinking", "loop", Evidence("x", 4, 3), 10, 40)
WALL = 1_767_225_600.0


def start(prompt: int = 32, msg_id: str = "chatcmpl-1") -> dict[str, Any]:
    return {"type": "message_start", "message": {
        "id": msg_id, "type": "message", "role": "assistant", "content": [], "model": "m",
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": 0}}}


def block(index: int, kind: str) -> dict[str, Any]:
    return {"type": "content_block_start", "content_block": {"type": kind, kind: ""},
            "index": index}


def delta(index: int, kind: str, text: str) -> dict[str, Any]:
    key = {"thinking": "thinking", "text": "text", "input_json": "partial_json"}[kind]
    return {"type": "content_block_delta", "delta": {"type": f"{kind}_delta", key: text},
            "index": index}


def stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def end(reason: str, prompt: int, output: int) -> list[dict[str, Any]]:
    return [{"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": None},
             "usage": {"input_tokens": prompt, "output_tokens": output}},
            {"type": "message_stop"}]


def sse(objs: list[dict[str, Any]]) -> bytes:
    return b"".join(encode(obj) for obj in objs)


def opened(*, stream: bool = True) -> Opened:
    """One exchange's parts, for a streaming client or (``stream=False``) not."""
    facts = MESSAGES.facts({"model": "m", "stream": stream})
    return MESSAGES.open(facts, DIALECTS["vllm"], request_id="r", model="m")


def attempt(parts: Opened, number: int = 0, earlier: Totals | None = None) -> Attempt:
    """Attempt ``number`` of the exchange ``parts``."""
    return parts.attempt(AttemptSpec(number, DetectorConfig(), 0.0, 0.0,
                                     earlier=earlier or Totals(),
                                     step="no-think" if number else "original"))
