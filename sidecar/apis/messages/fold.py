"""The non-streaming body of Anthropic Messages, folded from the events a streaming client
would have seen (pure).

The body is what vLLM 0.32 returns for ``"stream": false`` (checked against captured
bodies): ``id``, ``type``, ``role``, ``content``, ``model``, ``stop_reason``,
``stop_sequence`` (only when set) and ``usage``, with every null left out. Content
blocks come in stream order: ``thinking`` (with its signature), ``text``, ``tool_use``
(``input`` parsed from the streamed JSON); no block at all is one empty text block.
"""

from __future__ import annotations

from typing import Any

import orjson

from sidecar.apis.sse_events import EventFold
from sidecar.core.wire import Body


class _Block:
    __slots__ = ("kind", "parts", "signature", "start")

    def __init__(self, kind: str, start: dict[str, Any]) -> None:
        self.kind = kind
        self.start = start
        self.parts: list[str] = []
        self.signature: str | None = None


class MessagesFold(EventFold):
    """Accumulates the events of one (possibly spliced) message."""

    def __init__(self) -> None:
        self.message: dict[str, Any] = {}
        self.blocks: dict[int, _Block] = {}
        self.stop_reason: Any = None
        self.stop_sequence: Any = None
        self.usage: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None

    def add(self, obj: dict[str, Any]) -> None:
        """Fold one event in."""
        kind = obj.get("type")
        if kind == "content_block_delta":
            block = self.blocks.get(obj.get("index"))  # type: ignore[arg-type]
            delta = obj.get("delta")
            if block is None or not isinstance(delta, dict):
                return
            for key in ("thinking", "text", "partial_json"):
                text = delta.get(key)
                if isinstance(text, str):
                    block.parts.append(text)
            signature = delta.get("signature")
            if isinstance(signature, str):
                block.signature = signature
        elif kind == "content_block_start":
            start = obj.get("content_block")
            index = obj.get("index")
            if isinstance(start, dict) and isinstance(index, int):
                self.blocks[index] = _Block(str(start.get("type")), start)
        elif kind == "message_start":
            message = obj.get("message")
            if isinstance(message, dict) and not self.message:
                self.message = message
        elif kind == "message_delta":
            delta = obj.get("delta")
            if isinstance(delta, dict):
                self.stop_reason = delta.get("stop_reason")
                self.stop_sequence = delta.get("stop_sequence")
            usage = obj.get("usage")
            if isinstance(usage, dict):
                self.usage = usage
        elif kind == "error":
            self.error = obj

    def response(self) -> Body:
        """The message; a stream that ended with an error event is a 500 with it."""
        if self.error is not None:
            return Body(500, orjson.dumps(self.error))
        return Body(200, orjson.dumps(self.body()))

    def body(self) -> dict[str, Any]:
        """The message object, as vLLM's non-streaming body."""
        content = [self._block(self.blocks[i]) for i in sorted(self.blocks)]
        message = self.message
        out: dict[str, Any] = {
            "id": message.get("id"), "type": "message", "role": message.get("role", "assistant"),
            "content": content or [{"type": "text", "text": ""}], "model": message.get("model"),
            "stop_reason": self.stop_reason, "stop_sequence": self.stop_sequence,
            "usage": self.usage if self.usage is not None else message.get("usage"),
        }
        return {k: v for k, v in out.items() if v is not None}

    @staticmethod
    def _block(block: _Block) -> dict[str, Any]:
        text = "".join(block.parts)
        if block.kind == "thinking":
            return {"type": "thinking", "thinking": text, "signature": block.signature or ""}
        if block.kind == "tool_use":
            try:
                tool_input = orjson.loads(text) if text else {}
            except orjson.JSONDecodeError:
                tool_input = {}
            return {"type": "tool_use", "id": block.start.get("id"),
                    "name": block.start.get("name"), "input": tool_input}
        if block.kind == "text":
            return {"type": "text", "text": text}
        return dict(block.start)
