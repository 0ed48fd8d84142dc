"""The coding-agent APIs' streams as a client sees them, for the real-vLLM e2e suite (pure).

Anthropic Messages (``/v1/messages``) and OpenAI Responses (``/v1/responses``) stream named
SSE events. :func:`parse` splits a whole response body into its events (each validated as
the official SDK's event type) and its SSE comments (the sidecar's ``: runaway ...``);
:class:`MessagesStream` and :class:`ResponsesStream` read what a client would assemble
from them and check that they form one well-formed message or response.
:func:`normalized` blanks what the server draws afresh for every request (ids,
``created_at``, thinking-block signatures), for byte-for-byte comparisons.

Loaded by path from ``conftest.py`` (the e2e directory is no package); imports only the SDKs.
"""

from __future__ import annotations

import json
import re
import typing
from dataclasses import dataclass, field
from typing import Any

import anthropic.types
import openai.types.responses
import pydantic

APIS = ("messages", "responses")


def _classes(union: Any) -> dict[str, type[pydantic.BaseModel]]:
    """Each SDK event class of an annotated event union, by its ``type`` literal."""
    members = typing.get_args(typing.get_args(union)[0])
    out: dict[str, type[pydantic.BaseModel]] = {}
    for cls in members:
        for value in typing.get_args(cls.model_fields["type"].annotation):
            out[value] = cls
    return out


_EVENT_TYPES = {
    "messages": _classes(anthropic.types.RawMessageStreamEvent),
    "responses": _classes(openai.types.responses.ResponseStreamEvent),
}


@dataclass(slots=True)
class Parsed:
    """A named-event SSE body: its events as JSON objects (in order) and its comments."""

    events: list[dict[str, Any]] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    #: Events whose ``event:`` line did not name their ``type``.
    misnamed: list[str] = field(default_factory=list)


def parse(api: str, raw: bytes) -> Parsed:
    """Split ``raw`` (a whole SSE body of ``api``) into events and comments; every event is
    validated as the SDK's event class of its type (an unknown type fails)."""
    out = Parsed()
    for block in raw.decode("utf-8").split("\n\n"):
        name, data = None, []
        for line in block.split("\n"):
            if not line:
                continue
            if line.startswith(":"):
                out.comments.append(line[1:].strip())
            elif line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                data.append(line[len("data: ") :])
            else:
                raise AssertionError(f"unexpected SSE line {line!r}")
        if not data:
            continue
        obj = json.loads("\n".join(data))
        kind = obj.get("type")
        if kind != name:
            out.misnamed.append(f"{name!r} carries {kind!r}")
        if kind != "error":
            cls = _EVENT_TYPES[api].get(kind)
            assert cls is not None, f"{api}: unknown event type {kind!r}"
            cls.model_validate(_as_sdk_expects(obj))
        out.events.append(obj)
    return out


def _as_sdk_expects(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as the SDK's type requires it: vLLM opens a thinking block without the
    ``signature`` the SDK's ``ThinkingBlock`` requires (it sends it in a
    ``signature_delta`` before the block closes; the SDK's stream reader does not validate,
    so it takes the block as it is)."""
    block = obj.get("content_block")
    if obj.get("type") == "content_block_start" and isinstance(block, dict) and (
            block.get("type") == "thinking" and "signature" not in block):
        return {**obj, "content_block": {**block, "signature": ""}}
    return obj


def actions(comments: list[str]) -> list[str]:
    """The ``action=`` of each ``: runaway`` comment, in order."""
    found = [re.search(r"\baction=(\S+)", c) for c in comments if c.startswith("runaway")]
    return [m.group(1) for m in found if m]


@dataclass(slots=True)
class Block:
    """One content block of a message, or one output item of a response."""

    kind: str
    text: str = ""
    deltas: list[str] = field(default_factory=list)
    signature: str | None = None
    closed: bool = False
    id: str | None = None
    status: str | None = None


@dataclass(slots=True)
class MessagesStream:
    """An Anthropic Messages stream as the client assembled it, with what breaks its shape
    (``problems``: empty for one well-formed message)."""

    parsed: Parsed
    blocks: list[Block] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    message: dict[str, Any] = field(default_factory=dict)
    stop_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    errors: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, raw: bytes) -> MessagesStream:
        """Read a whole ``/v1/messages`` stream body."""
        out = cls(parse("messages", raw))
        counts: dict[str, int] = {}
        for obj in out.parsed.events:
            kind = obj["type"]
            counts[kind] = counts.get(kind, 0) + 1
            index = obj.get("index")
            if kind == "message_start":
                out.message = obj["message"]
            elif kind == "content_block_start":
                if index != len(out.blocks):
                    out.problems.append(f"block {index} started after {len(out.blocks)} blocks")
                if out.blocks and not out.blocks[-1].closed:
                    out.problems.append(f"block {index} started with the last one open")
                out.blocks.append(Block(obj["content_block"]["type"]))
            elif kind in ("content_block_delta", "content_block_stop"):
                if index != len(out.blocks) - 1 or out.blocks[-1].closed:
                    out.problems.append(f"{kind} for block {index}, not the open one")
                    continue
                block = out.blocks[-1]
                if kind == "content_block_stop":
                    block.closed = True
                    continue
                delta = obj["delta"]
                piece = delta.get("thinking", delta.get("text", delta.get("partial_json")))
                if isinstance(piece, str):
                    block.deltas.append(piece)
                    block.text += piece
                if "signature" in delta:
                    block.signature = delta["signature"]
            elif kind == "message_delta":
                out.stop_reason = obj["delta"].get("stop_reason")
                out.usage = obj["usage"]
            elif kind == "error":
                out.errors.append(obj["error"])
        for kind in ("message_start", "message_delta", "message_stop"):
            if counts.get(kind, 0) != 1:
                out.problems.append(f"{counts.get(kind, 0)} {kind} events, not one")
        if out.parsed.events and out.parsed.events[-1]["type"] != "message_stop":
            out.problems.append("the stream does not end with message_stop")
        out.problems += [f"unclosed {b.kind} block" for b in out.blocks if not b.closed]
        out.problems += [f"thinking block without a signature ({b.text[:40]!r})"
                         for b in out.blocks if b.kind == "thinking" and not b.signature]
        out.problems += out.parsed.misnamed
        return out

    def text(self, kind: str) -> str:
        """The text of every block of ``kind`` (``thinking``, ``text``) joined."""
        return "".join(b.text for b in self.blocks if b.kind == kind)


@dataclass(slots=True)
class ResponsesStream:
    """An OpenAI Responses stream as the client assembled it, with what breaks its shape
    (``problems``: empty for one well-formed response)."""

    parsed: Parsed
    items: list[Block] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    created: dict[str, Any] = field(default_factory=dict)
    final: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, raw: bytes) -> ResponsesStream:
        """Read a whole ``/v1/responses`` stream body."""
        out = cls(parse("responses", raw))
        events = out.parsed.events
        numbers = [e.get("sequence_number") for e in events]
        if numbers != list(range(len(events))):
            out.problems.append(f"sequence_number not 0, 1, 2, ...: {numbers[:8]}...")
        counts: dict[str, int] = {}
        for obj in events:
            kind = obj["type"]
            counts[kind] = counts.get(kind, 0) + 1
            index = obj.get("output_index")
            if kind == "response.created":
                out.created = obj["response"]
            elif kind == "response.output_item.added":
                if index != len(out.items):
                    out.problems.append(f"item {index} added after {len(out.items)} items")
                if out.items and not out.items[-1].closed:
                    out.problems.append(f"item {index} added with the last one open")
                item = obj["item"]
                out.items.append(Block(item["type"], id=item["id"]))
            elif index is not None:
                if index != len(out.items) - 1 or out.items[-1].closed:
                    out.problems.append(f"{kind} for item {index}, not the open one")
                    continue
                item_block = out.items[-1]
                if kind in ("response.reasoning_text.delta", "response.output_text.delta"):
                    item_block.deltas.append(obj["delta"])
                    item_block.text += obj["delta"]
                elif kind == "response.output_item.done":
                    item_block.closed = True
                    item_block.status = obj["item"].get("status")
                    if obj["item"]["id"] != item_block.id:
                        out.problems.append(f"item {index} done with another id")
            elif kind in ("response.completed", "response.incomplete"):
                out.final = obj["response"]
        for kind in ("response.created", "response.in_progress"):
            if counts.get(kind, 0) != 1:
                out.problems.append(f"{counts.get(kind, 0)} {kind} events, not one")
        ends = counts.get("response.completed", 0) + counts.get("response.incomplete", 0)
        if ends != 1 or events[-1]["type"] not in ("response.completed", "response.incomplete"):
            out.problems.append(f"{ends} final events, or not last")
        out.problems += [f"unclosed {b.kind} item" for b in out.items if not b.closed]
        if out.final and out.created:
            for key in ("id", "created_at"):
                if out.final.get(key) != out.created.get(key):
                    out.problems.append(f"the final {key} is not response.created's")
            ids = [item.get("id") for item in out.final.get("output", [])]
            if ids != [b.id for b in out.items]:
                out.problems.append(f"final output ids {ids} are not the streamed items")
        out.problems += out.parsed.misnamed
        return out

    def text(self, kind: str) -> str:
        """The text of every item of ``kind`` (``reasoning``, ``message``) joined."""
        return "".join(b.text for b in self.items if b.kind == kind)

    @property
    def usage(self) -> dict[str, Any]:
        """The final response's usage."""
        usage: dict[str, Any] = self.final.get("usage") or {}
        return usage


# What vLLM draws afresh for every request: blanked before a byte comparison.
_FRESH = (
    (re.compile(rb'"id":"chatcmpl-[0-9a-f]+"'), b'"id":"chatcmpl-*"'),
    (re.compile(rb'"signature":"[0-9a-f]{32}"'), b'"signature":"*"'),
    (re.compile(rb'"(resp|rs|msg|fc)_[0-9a-f]{16}"'), rb'"\1_*"'),
    (re.compile(rb'"created_at":[0-9]+'), b'"created_at":*'),
)


def normalized(raw: bytes) -> bytes:
    """``raw`` with ids, ``created_at`` and thinking-block signatures blanked."""
    for pattern, repl in _FRESH:
        raw = pattern.sub(repl, raw)
    return raw


def delta_texts(api: str, parsed: Parsed) -> list[str]:
    """The text of every reasoning and answer delta, in order."""
    out = []
    for obj in parsed.events:
        if api == "messages" and obj["type"] == "content_block_delta":
            delta = obj["delta"]
            piece = delta.get("thinking", delta.get("text"))
            if isinstance(piece, str):
                out.append(piece)
        elif obj["type"] in ("response.reasoning_text.delta", "response.output_text.delta"):
            out.append(obj["delta"])
    return out
