"""What the sidecar writes itself into an OpenAI chat-completions or completions response
when it splices (pure): the splicer of one exchange, and the chunks it is made of.

After a cut, the client keeps the ``id``, ``created`` and ``model`` of the first attempt
(its ``Head``). Reissued chunks are rewritten to carry them and their choice indices are
mapped back onto the choices that were still open; the synthetic chunks below (a
``</think>`` close for inline-tag streams, a ``length`` finish, the summed usage) use the
same vLLM 0.32 field layout as real chunks. A cut is recorded by one SSE comment, which
clients ignore.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from detectors import Verdict
from sidecar.apis.openai.chunks import ChunkKind
from sidecar.apis.openai.fold import OpenAIFold
from sidecar.core.attempt import MARK_HEAD, Attempt, Totals, reasoning_mark
from sidecar.core.wire import Splicer
from sidecar.errors import UpstreamError, upstream_error_body

DONE_EVENT = b"data: [DONE]\n\n"


@dataclass(frozen=True, slots=True)
class Head:
    """The identity of the client's response, taken from the first chunk it saw."""

    id: Any
    created: Any
    model: Any
    kind: ChunkKind

    @property
    def object(self) -> str:
        return "chat.completion.chunk" if self.kind == "chat" else "text_completion"


def event(obj: dict[str, Any]) -> bytes:
    """One SSE event carrying ``obj``."""
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def comment(verdict: Verdict, action: str, attempt: int) -> bytes:
    """The single ``: runaway ...`` comment line recording a cut. Clients ignore comments."""
    ev = verdict.evidence
    return (
        f": runaway detector={verdict.detector} channel={verdict.channel} "
        f"at_token={verdict.at_token} period={ev.period} count={ev.count} "
        f"action={action} attempt={attempt}\n\n"
    ).encode()


def _chunk(head: Head, choices: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": head.id, "object": head.object, "created": head.created, "model": head.model,
            "choices": choices}


def content_chunk(head: Head, index: int, text: str) -> bytes:
    """A chunk that adds ``text`` to choice ``index``'s answer."""
    if head.kind == "chat":
        choice = {"index": index, "delta": {"content": text}, "logprobs": None,
                  "finish_reason": None, "token_ids": None}
    else:
        choice = {"index": index, "text": text, "logprobs": None, "finish_reason": None,
                  "stop_reason": None, "prompt_token_ids": None, "token_ids": None}
    return event(_chunk(head, [choice]))


def finish_chunk(head: Head, index: int, reason: str) -> bytes:
    """A chunk that ends choice ``index`` with ``reason``."""
    if head.kind == "chat":
        choice = {"index": index, "delta": {}, "logprobs": None, "finish_reason": reason,
                  "stop_reason": None, "token_ids": None}
    else:
        choice = {"index": index, "text": "", "logprobs": None, "finish_reason": reason,
                  "stop_reason": None, "prompt_token_ids": None, "token_ids": None}
    return event(_chunk(head, [choice]))


def usage_chunk(head: Head, usage: dict[str, Any]) -> bytes:
    """The final ``choices: []`` chunk with ``usage``."""
    obj = _chunk(head, [])
    obj["usage"] = usage
    return event(obj)


def is_role_only(choice: dict[str, Any]) -> bool:
    """The first chunk of a choice, ``delta: {role, content: ""}``, carries nothing new."""
    delta = choice.get("delta")
    return (isinstance(delta, dict) and "role" in delta and not delta.get("content")
            and not delta.get("reasoning") and not delta.get("tool_calls")
            and choice.get("finish_reason") is None)


def rewrite(
    head: Head, obj: dict[str, Any], index_map: Mapping[int, int], *,
    reasoning_to_content: bool,
) -> dict[str, Any] | None:
    """A reissued chunk as the client must see it, or None to drop it (role-only chunks).

    ``reasoning_to_content`` moves ``delta.reasoning`` into ``delta.content``: after a
    salvage prefill vLLM still labels the answer as reasoning.
    """
    obj["id"], obj["created"], obj["model"] = head.id, head.created, head.model
    choices = obj.get("choices")
    if not isinstance(choices, list):
        return obj
    kept = []
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        if is_role_only(choice):
            continue
        index = choice.get("index", 0)
        choice["index"] = index_map.get(index, index) if isinstance(index, int) else index
        delta = choice.get("delta")
        if reasoning_to_content and isinstance(delta, dict):
            for key in ("reasoning", "reasoning_content"):
                text = delta.pop(key, None)
                if isinstance(text, str) and text:
                    delta["content"] = (delta.get("content") or "") + text
        kept.append(choice)
    if choices and not kept:
        return None
    obj["choices"] = kept
    return obj


def strip_reasoning(obj: dict[str, Any]) -> dict[str, Any] | None:
    """``obj`` without reasoning text, or None when nothing else was in it (what vLLM
    sends for ``include_reasoning: false``)."""
    kept = []
    for choice in obj.get("choices") or ():
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if isinstance(delta, dict):
            delta.pop("reasoning", None)
            delta.pop("reasoning_content", None)
            if not delta and choice.get("finish_reason") is None:
                continue
        kept.append(choice)
    if not kept and not obj.get("usage"):
        return None
    obj["choices"] = kept
    return obj


class OpenAISplicer(Splicer):
    """The splicer of one chat-completions or completions exchange.

    ``head`` is the first attempt's identity, set by that attempt when its first chunk
    arrives; a cut before any chunk makes one from the request id. A streaming client
    sees the marker comment, a ``</think>`` for choices left inside an inline block, and
    at the end ``length`` finishes, the summed usage and ``[DONE]``; a non-streaming
    client's :class:`OpenAIFold` gets the same finishes and usage (no marker and no
    ``</think>``: its body carries ``X-Runaway-*`` headers instead). Each cut marks the
    reasoning each client choice holds so far (:func:`reasoning_mark`), which is what a
    client sends back as ``reasoning``/``reasoning_content`` in a later request."""

    def __init__(self, kind: ChunkKind, fold: OpenAIFold | None, *, request_id: str,
                 model: str | None) -> None:
        super().__init__()
        self.kind = kind
        self.fold = fold
        self.head: Head | None = None
        self._request_id = request_id
        self._model = model
        # Client choice -> (characters, first characters) of its reasoning so far.
        self._reasoning: dict[int, tuple[int, str]] = {}

    def ensure_head(self, wall: float) -> Head:
        """The head, made from the request when no chunk arrived before the cut."""
        if self.head is None:
            prefix = "chatcmpl" if self.kind == "chat" else "cmpl"
            self.head = Head(f"{prefix}-{self._request_id}", int(wall), self._model, self.kind)
        return self.head

    def _mark(self, attempt: Attempt) -> None:
        """Mark what each client choice holds of reasoning once ``attempt`` is cut."""
        for index, state in attempt.choices.items():
            if not state.reasoning_seen:
                continue
            client = attempt.index_map.get(index, index)
            seen, head = self._reasoning.get(client, (0, ""))
            if seen < MARK_HEAD:
                head += state.reasoning_head
            seen += state.reasoning_seen
            self._reasoning[client] = (seen, head[:MARK_HEAD])
            self.marks.append(reasoning_mark(seen, head))

    def cut(self, attempt: Attempt, verdict: Verdict, action: str, number: int,
            open_choices: Sequence[int], *, wall: float) -> bytes:
        head = self.ensure_head(wall)
        self._mark(attempt)
        if self.fold is not None:
            return b""
        parts = [comment(verdict, action, number)]
        parts += [content_chunk(head, i, "</think>") for i in open_choices
                  if attempt.inline_open(i)]
        return b"".join(parts)

    def end(self, attempt: Attempt, verdict: Verdict, action: str, number: int,
            open_choices: Sequence[int], totals: Totals, *, usage: bool, elapsed: float,
            wall: float) -> bytes:
        head = self.ensure_head(wall)
        self._mark(attempt)
        fold = self.fold
        if fold is not None:
            for index in open_choices:
                fold.set_choice_text(index, finish_reason="length")
            fold.set_usage(totals.usage())
            if not fold.head:
                fold.head = {"id": head.id, "created": head.created, "model": head.model}
            return b""
        parts = [comment(verdict, action, number)]
        parts += [finish_chunk(head, i, "length") for i in open_choices]
        if usage:
            parts.append(usage_chunk(head, totals.usage()))
        parts.append(DONE_EVENT)
        return b"".join(parts)

    def error(self, err: UpstreamError) -> bytes:
        return b"data: " + upstream_error_body(err) + b"\n\n" + DONE_EVENT
