"""The non-streaming body of OpenAI Responses (``sidecar.apis.responses.fold``)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from sidecar.apis.responses.fold import ResponsesFold
from tests.apis.responses_events import attempt, completed, opened, usage
from tests.conftest import DATA

AGENT_CAPTURES = DATA / "captures" / "vllm-0.32.0-agent-apis"


def _same_but_ids(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with what differs between two requests (ids, the time) blanked."""
    return {**body, "id": "-", "created_at": 0,
            "output": [{**item, "id": "-"} for item in body["output"]]}


@pytest.mark.parametrize("name", ["responses_thinking_loop", "responses_effort_none"])
def test_a_folded_stream_is_vllms_own_body(name: str) -> None:
    """vLLM's stream, folded, gives vLLM's non-streaming body for the same request: the
    final response object, the same fields in the same order, reasoning items with
    ``status: null`` (only ids and the time differ)."""
    parts = opened(stream=False)
    assert parts.fold is not None
    assert attempt(parts).feed((AGENT_CAPTURES / f"{name}.sse").read_bytes(), 1.0) == b""
    got = parts.fold.response()
    assert got.status == 200
    want = orjson.loads((AGENT_CAPTURES / f"{name}_nonstream.json").read_bytes())
    body = orjson.loads(got.body)
    assert list(body) == list(want)
    assert _same_but_ids(body) == _same_but_ids(want)


def test_an_error_or_no_end_is_a_500_in_openais_shape() -> None:
    """An ``error`` event, or a stream that never completed, is a 500 with an OpenAI error;
    a completed response after an error is still the error."""
    fold = ResponsesFold()
    response = fold.response()
    assert response.status == 500
    assert orjson.loads(response.body)["error"]["message"] == (
        "upstream ended the response without completing it")
    fold.add({"type": "error", "message": "busy", "code": "503"})
    fold.add(completed([], usage(1, 1, 0)))
    assert orjson.loads(fold.response().body)["error"]["message"] == "busy"
