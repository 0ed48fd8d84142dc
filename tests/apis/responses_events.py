"""OpenAI Responses events for the tests, as vLLM 0.32 writes them (field order of
``tests/data/captures/vllm-0.32.0-agent-apis/responses_*.sse``, the response object cut
to the fields the sidecar reads), and one exchange's parts."""

from __future__ import annotations

from typing import Any

from detectors import DetectorConfig, Evidence, Verdict
from sidecar.apis.responses.api import RESPONSES
from sidecar.apis.sse_events import encode
from sidecar.core.attempt import Attempt, AttemptSpec, Totals
from sidecar.core.wire import Opened
from sidecar.dialects import DIALECTS

VERDICT = Verdict("periodic", "thinking", "loop", Evidence("x", 4, 3), 10, 40)
WALL = 1_767_225_600.0


def response(resp_id: str = "resp_1", status: str = "in_progress",
             output: list[dict[str, Any]] | None = None,
             usage: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"id": resp_id, "created_at": 1796425796, "model": "m", "object": "response",
            "output": output or [], "reasoning": None, "status": status, "usage": usage}


def usage(prompt: int, output: int, reasoning: int) -> dict[str, Any]:
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": prompt + output}


def head(resp_id: str = "resp_1") -> list[dict[str, Any]]:
    """``response.created`` and ``response.in_progress`` (numbered 0 and 1)."""
    return [{"response": response(resp_id), "type": kind}
            for kind in ("response.created", "response.in_progress")]


def reasoning(index: int, item_id: str, *texts: str) -> list[dict[str, Any]]:
    """A reasoning item opened at ``index``, its part, and a delta per text."""
    return [{"item": {"id": item_id, "summary": [], "type": "reasoning", "content": None,
                      "encrypted_content": None, "status": "in_progress"},
             "output_index": index, "type": "response.output_item.added"},
            {"content_index": 0, "item_id": item_id, "output_index": index,
             "part": {"text": "", "type": "reasoning_text"},
             "type": "response.content_part.added"},
            *({"content_index": 0, "delta": text, "item_id": item_id, "output_index": index,
               "type": "response.reasoning_text.delta"} for text in texts)]


def message(index: int, item_id: str, *texts: str) -> list[dict[str, Any]]:
    """A message item opened at ``index``, its part, and a delta per text."""
    return [{"item": {"id": item_id, "content": [], "role": "assistant",
                      "status": "in_progress", "type": "message", "phase": None},
             "output_index": index, "type": "response.output_item.added"},
            {"content_index": 0, "item_id": item_id, "output_index": index,
             "part": {"annotations": [], "text": "", "type": "output_text", "logprobs": []},
             "type": "response.content_part.added"},
            *({"content_index": 0, "delta": text, "item_id": item_id, "logprobs": [],
               "output_index": index, "type": "response.output_text.delta"}
              for text in texts)]


def item_done(index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"item": item, "output_index": index, "type": "response.output_item.done"}


def completed(output: list[dict[str, Any]], used: dict[str, Any],
              resp_id: str = "resp_1") -> dict[str, Any]:
    return {"response": response(resp_id, "completed", output, used),
            "type": "response.completed"}


def sse(objs: list[dict[str, Any]], *, first: int = 0, numbered: bool = True) -> bytes:
    """The events ``objs``, numbered from ``first`` (``numbered=False``: as llama.cpp,
    without numbers or ``output_index``)."""
    out = []
    for number, obj in enumerate(objs, first):
        if numbered:
            event = {**obj, "sequence_number": number}
            event["type"] = event.pop("type")  # vLLM writes the type last
        else:
            event = {k: v for k, v in obj.items() if k != "output_index"}
        out.append(encode(event))
    return b"".join(out)


def opened(*, stream: bool = True, hide: bool = False) -> Opened:
    """One exchange's parts, for a streaming client or (``stream=False``) not; ``hide``:
    the client sent ``include_reasoning: false``."""
    body: dict[str, Any] = {"model": "m", "stream": stream, "reasoning": {"effort": "high"}}
    if hide:
        body["include_reasoning"] = False
    return RESPONSES.open(RESPONSES.facts(body), DIALECTS["vllm"], request_id="r", model="m")


def attempt(parts: Opened, number: int = 0, earlier: Totals | None = None) -> Attempt:
    """Attempt ``number`` of the exchange ``parts``."""
    return parts.attempt(AttemptSpec(number, DetectorConfig(), 0.0, 0.0,
                                     earlier=earlier or Totals(),
                                     step="no-think" if number else "original"))
