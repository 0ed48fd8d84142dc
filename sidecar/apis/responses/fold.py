"""The non-streaming body of OpenAI Responses, folded from the events a streaming client
would have seen (pure).

The body is the response object of the final ``response.completed`` event (after the
splice: the client's identity, every item, the summed usage), as vLLM 0.32 returns it
for ``"stream": false`` (checked against captured bodies): the same fields in the same
order, except that reasoning items have ``status: null``.
"""

from __future__ import annotations

from typing import Any

import orjson

from sidecar.apis.sse_events import EventFold
from sidecar.core.wire import Body
from sidecar.errors import error_body

_ENDS = ("response.completed", "response.incomplete", "response.failed")


class ResponsesFold(EventFold):
    """Keeps the final response object of one (possibly spliced) response."""

    def __init__(self) -> None:
        self.final: dict[str, Any] | None = None
        self.error: str | None = None

    def add(self, obj: dict[str, Any]) -> None:
        """Fold one event in (only the end and errors matter)."""
        kind = obj.get("type")
        if kind in _ENDS:
            response = obj.get("response")
            if isinstance(response, dict):
                self.final = response
        elif kind == "error":
            self.error = str(obj.get("message") or "upstream error")

    def response_body(self) -> dict[str, Any]:
        """The response object as a non-streaming body."""
        assert self.final is not None
        out = dict(self.final)
        output = out.get("output")
        if isinstance(output, list):
            out["output"] = [{**item, "status": None}
                             if isinstance(item, dict) and item.get("type") == "reasoning"
                             else item for item in output]
        return out

    def response(self) -> Body:
        """The response; a stream that ended with an error event, or without a response,
        is a 500 in the OpenAI error shape."""
        if self.error is not None or self.final is None:
            message = self.error or "upstream ended the response without completing it"
            return Body(500, error_body(message, "InternalServerError", 500))
        return Body(200, orjson.dumps(self.response_body()))
