"""The non-streaming body of Ollama's native API, folded from the lines a streaming client
would have seen (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import orjson

from sidecar.core.wire import Body, Fold

#: The two native APIs: ``/api/chat`` (text in ``message``) and ``/api/generate`` (text at
#: the top level). Every part of this package reads it.
LineKind = Literal["chat", "generate"]


class OllamaFold(Fold):
    """Folds the NDJSON lines a streaming client would have seen into the single JSON
    object of a ``"stream": false`` response (what Ollama itself returns)."""

    def __init__(self, kind: LineKind) -> None:
        self.kind = kind
        self._content: list[str] = []
        self._thinking: list[str] = []
        self._tool_calls: list[Any] = []
        self._last: dict[str, Any] = {}
        self.error: str | None = None

    def add(self, obj: Mapping[str, Any]) -> None:
        """Fold one parsed line in."""
        if "error" in obj:
            self.error = str(obj["error"])
            return
        source: Mapping[str, Any] = obj
        if self.kind == "chat":
            message = obj.get("message")
            source = message if isinstance(message, dict) else {}
        text = source.get("content" if self.kind == "chat" else "response")
        if isinstance(text, str):
            self._content.append(text)
        thinking = source.get("thinking")
        if isinstance(thinking, str):
            self._thinking.append(thinking)
        calls = source.get("tool_calls")
        if isinstance(calls, list):
            self._tool_calls.extend(calls)
        self._last = dict(obj)

    def response(self) -> Body:
        """The whole response; a stream that ended with an error line is a 500 with it."""
        if self.error is not None:
            return Body(500, orjson.dumps({"error": self.error}))
        return Body(200, self.body(), "utf-8")

    def body(self) -> bytes:
        """The whole response: the last line's fields with the text joined."""
        out = dict(self._last)
        thinking = "".join(self._thinking)
        if self.kind == "chat":
            message: dict[str, Any] = {"role": "assistant", "content": "".join(self._content)}
            if thinking:
                message["thinking"] = thinking
            if self._tool_calls:
                message["tool_calls"] = self._tool_calls
            out["message"] = message
        else:
            out["response"] = "".join(self._content)
            if thinking:
                out["thinking"] = thinking
        return orjson.dumps(out)
