"""What the sidecar writes itself into an Anthropic Messages response when it splices
(pure): the splicer of one exchange.

The client sees one message: one ``message_start``, content blocks indexed 0, 1, 2, ...
without a gap, and one ``message_delta`` and ``message_stop`` at the end. So:

- the block a cut leaves open is closed: a ``thinking`` block gets a ``signature_delta``
  with a signature the sidecar chose (its mark: a later request that sends this block
  back gets it replaced, see ``api.py``), then ``content_block_stop``; a text block left
  inside an inline ``<think>`` gets a ``</think>`` first;
- a reissue's ``message_start`` is dropped (unless the client has none yet), its block
  indices move past the blocks the client already has, and its ``message_delta`` usage
  adds every earlier attempt's tokens;
- the ladder's end closes the open block and ends the message with
  ``stop_reason: "max_tokens"`` and the usage of every attempt.

A streaming client also gets one SSE comment per cut (``: runaway ...``); SSE clients
ignore comments. Events the sidecar writes are serialized as vLLM writes them: compact
JSON, the fields in vLLM's order, ``index`` last.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from detectors import Verdict
from sidecar.apis.messages.fold import MessagesFold
from sidecar.apis.openai.splice import comment
from sidecar.apis.sse_events import EventSplicer, encode, token_count
from sidecar.core.attempt import Attempt, Totals
from sidecar.errors import UpstreamError

#: The first characters of every signature the sidecar gives a cut thinking block. A
#: signature is 32 hex characters, as vLLM's are; clients treat it as opaque.
MARK_PREFIX = "5ca1ab1e"

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                403: "permission_error", 404: "not_found_error", 408: "timeout_error",
                413: "request_too_large", 429: "rate_limit_error", 504: "timeout_error",
                529: "overloaded_error"}


def error_type(status: int) -> str:
    """Anthropic's error type for an HTTP status (``api_error`` for any other 5xx)."""
    return _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def error_object(status: int, message: str) -> dict[str, Any]:
    """An Anthropic error object: ``{"type": "error", "error": {"type", "message"}}``."""
    return {"type": "error", "error": {"type": error_type(status), "message": message}}


def signature_mark(request_id: str, index: int) -> str:
    """The signature of the cut thinking block at client ``index`` of a request."""
    digest = hashlib.blake2b(f"{request_id}:{index}".encode(), digest_size=12).hexdigest()
    return MARK_PREFIX + digest


class MessagesSplicer(EventSplicer):
    """The splicer of one Messages exchange (see the module docstring). ``seen`` is fed
    every event the client gets that opens, closes or frames a block or the message."""

    def __init__(self, fold: MessagesFold | None, *, request_id: str, model: str | None) -> None:
        super().__init__(fold, request_id=request_id, model=model)
        self.started = False
        #: Blocks the client has (the next client index).
        self.blocks = 0
        #: The client block left open (index, type), if any.
        self.open: tuple[int, str] | None = None
        self._offset = 0

    # -- the client's view ---------------------------------------------------------

    def seen(self, obj: dict[str, Any]) -> None:
        """An event the client got (an attempt's, or the sidecar's own)."""
        kind = obj.get("type")
        index = obj.get("index")
        if kind == "content_block_start" and isinstance(index, int):
            block = obj.get("content_block")
            btype = block.get("type") if isinstance(block, dict) else None
            self.open = (index, btype if isinstance(btype, str) else "text")
            self.blocks = max(self.blocks, index + 1)
        elif kind == "content_block_stop":
            self.open = None
        elif kind == "message_start":
            self.started = True

    def rewrite(self, obj: dict[str, Any], attempt: Attempt) -> dict[str, Any] | None:
        """A reissue's event as the client sees it, or None to drop it."""
        kind = obj.get("type")
        if kind == "message_start":
            return None if self.started else obj
        index = obj.get("index")
        if isinstance(index, int) and kind in (
                "content_block_start", "content_block_delta", "content_block_stop"):
            obj["index"] = index + self._offset
        elif kind == "message_delta":
            usage = obj.get("usage")
            if isinstance(usage, dict):
                obj["usage"] = summed_usage(usage, attempt)
        return obj

    # -- the sidecar's own events ----------------------------------------------------

    def _close(self, attempt: Attempt) -> list[dict[str, Any]]:
        """The events that close the block a cut left open."""
        if self.open is None:
            return []
        index, btype = self.open
        out: list[dict[str, Any]] = []
        if btype == "thinking":
            mark = signature_mark(self._request_id, index)
            self.marks.append(mark)
            out.append({"type": "content_block_delta",
                        "delta": {"type": "signature_delta", "signature": mark}, "index": index})
        elif btype == "text" and attempt.inline_open(0):
            out.append({"type": "content_block_delta",
                        "delta": {"type": "text_delta", "text": "</think>"}, "index": index})
        out.append({"type": "content_block_stop", "index": index})
        return out

    def cut(self, attempt: Attempt, verdict: Verdict, action: str, number: int,
            open_choices: Sequence[int], *, wall: float) -> bytes:
        out = self._emit(self._close(attempt), comment(verdict, action, number))
        self._offset = self.blocks
        return out

    def end(self, attempt: Attempt, verdict: Verdict, action: str, number: int,
            open_choices: Sequence[int], totals: Totals, *, usage: bool, elapsed: float,
            wall: float) -> bytes:
        objs = self._close(attempt)
        if not self.started:
            objs.insert(0, {"type": "message_start", "message": {
                "id": f"chatcmpl-{self._request_id}", "type": "message", "role": "assistant",
                "content": [], "model": self._model, "stop_reason": None,
                "stop_sequence": None, "usage": {"input_tokens": totals.usage()[
                    "prompt_tokens"], "output_tokens": 0}}})
        counts = totals.usage()
        objs.append({"type": "message_delta",
                     "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
                     "usage": {"input_tokens": counts["prompt_tokens"],
                               "output_tokens": counts["completion_tokens"]}})
        objs.append({"type": "message_stop"})
        return self._emit(objs, comment(verdict, action, number))

    def error(self, err: UpstreamError) -> bytes:
        return encode(error_object(err.status, str(err)))


def summed_usage(usage: dict[str, Any], attempt: Attempt) -> dict[str, Any]:
    """A reissue's final usage with every earlier attempt's tokens added: the prompt once
    per attempt (an attempt cut before its usage arrived is billed this one's prompt),
    and every token generated."""
    earlier = attempt.earlier
    out = dict(usage)
    prompt = token_count(out.get("input_tokens"))
    out["input_tokens"] = prompt + earlier.prompt_tokens + earlier.unknown_prompts * prompt
    out["output_tokens"] = token_count(out.get("output_tokens")) + earlier.completion_tokens
    return out
