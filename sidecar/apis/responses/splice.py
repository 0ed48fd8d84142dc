"""What the sidecar writes itself into an OpenAI Responses response when it splices (pure):
the splicer of one exchange.

The client sees one response: one ``response.created`` (and ``response.in_progress``),
``sequence_number`` strictly increasing from 0 over every event, ``output_index``
0, 1, 2, ... per item without a gap, every item it saw added also done, and one
``response.completed`` whose ``id`` and ``created_at`` are the first attempt's and whose
``output`` holds every item the client got. So:

- the item a cut leaves open is closed with the events its server would have sent
  (``….done``, ``response.content_part.done``, ``response.output_item.done``) and status
  ``incomplete``; a reasoning item the sidecar cut is marked by its id (a later request
  that sends it back gets it replaced, see ``api.py``);
- a reissue's ``response.created`` and ``response.in_progress`` are dropped, its events
  renumbered (``sequence_number`` continues the client's; ``output_index`` moves past the
  client's items), and its ``response.completed`` gets the client's identity, every
  item, the client's own ``reasoning`` request field (not the thinking-off one) and the
  usage of every attempt;
- the ladder's end closes the open item and completes the response with status
  ``incomplete`` (``incomplete_details.reason: "max_output_tokens"``).

A server that numbers no events (llama.cpp) gets no numbers added. A streaming client
also gets one SSE comment per cut (``: runaway ...``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from detectors import Verdict
from sidecar.apis.openai.splice import comment
from sidecar.apis.responses.fold import ResponsesFold
from sidecar.apis.sse_events import EventAttempt, EventSplicer, encode, token_count
from sidecar.core.attempt import Attempt, Totals
from sidecar.core.kept import KeptText
from sidecar.errors import UpstreamError

_ENDS = ("response.completed", "response.incomplete", "response.failed")


def usage_object(prompt: int, completion: int, reasoning: int) -> dict[str, Any]:
    """A usage object with vLLM 0.32's fields."""
    return {"input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0,
                                     "input_tokens_per_turn": [], "cached_tokens_per_turn": []},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": reasoning, "tool_output_tokens": 0,
                                      "output_tokens_per_turn": [],
                                      "tool_output_tokens_per_turn": []},
            "total_tokens": prompt + completion}


class _OpenItem:
    __slots__ = ("content_index", "index", "item", "part")

    def __init__(self, index: int, item: dict[str, Any]) -> None:
        self.index = index
        self.item = item
        self.part: dict[str, Any] | None = None
        self.content_index = 0


class ResponsesSplicer(EventSplicer):
    """The splicer of one Responses exchange (see the module docstring). ``seen`` is fed
    every event the client gets that creates the response or adds or completes an item."""

    def __init__(self, fold: ResponsesFold | None, *, request_id: str, model: str | None,
                 echo: Mapping[str, Any], hide: bool = False) -> None:
        super().__init__(fold, request_id=request_id, model=model)
        #: The client asked not to see reasoning (``include_reasoning: false``): the
        #: sidecar asked for it anyway, to watch it, and drops its items here, numbering
        #: the rest as the server would have.
        self.hide = hide
        self._hidden: set[str] = set()
        self._hidden_at: list[int] = []
        self._echo = echo
        #: The client's response object, from the first ``response.created`` it got.
        self.response: dict[str, Any] | None = None
        #: The client's last ``sequence_number`` (None: the server numbers no events).
        self.sequence: int | None = None
        #: Items the client has (the next ``output_index``), the ones it saw done, and the
        #: one open.
        self.items = 0
        self.done: list[dict[str, Any]] = []
        self.open: _OpenItem | None = None
        self._offset = 0
        self._done_before = 0
        #: The server gives items an ``output_index`` (llama.cpp does not: then neither
        #: does the sidecar, and items are counted in order).
        self.indexed = True
        #: The text of the open item (bounded), for the events that close it after a cut
        #: (with the attempt's ``upstream_sequence``). The attempt keeps it up to date
        #: (``kept.keep``: once per delta).
        self.kept = KeptText()

    # -- the client's view ---------------------------------------------------------

    def seen(self, obj: dict[str, Any]) -> None:
        """An event the client got (an attempt's, or the sidecar's own)."""
        kind = obj.get("type")
        if kind == "response.output_item.added":
            index, item = obj.get("output_index"), obj.get("item")
            if not isinstance(index, int):  # a server that numbers no items (llama.cpp)
                index, self.indexed = self.items, False
            if isinstance(item, dict):
                self.open = _OpenItem(index, item)
                self.items = max(self.items, index + 1)
                self.kept.clear()
        elif kind == "response.content_part.added":
            part = obj.get("part")
            if self.open is not None and isinstance(part, dict):
                self.open.part = part
                index = obj.get("content_index")
                self.open.content_index = index if isinstance(index, int) else 0
        elif kind == "response.output_item.done":
            item = obj.get("item")
            if isinstance(item, dict):
                self.done.append(item)
            self.open = None
        elif kind == "response.created" and self.response is None:
            response = obj.get("response")
            if isinstance(response, dict):
                self.response = response

    def _number(self, obj: dict[str, Any]) -> None:
        """Number ``obj`` as the client's next event; where the server numbers no events,
        take its number out."""
        if self.sequence is None:
            obj.pop("sequence_number", None)
        else:
            self.sequence += 1
            obj["sequence_number"] = self.sequence

    def _hidden_item(self, kind: Any, obj: dict[str, Any]) -> bool:
        """Whether ``obj`` belongs to a reasoning item the client must not see."""
        item = obj.get("item")
        if kind == "response.output_item.added" and isinstance(item, dict) and (
                item.get("type") == "reasoning"):
            self._hidden.add(str(item.get("id")))
            index = obj.get("output_index")
            if isinstance(index, int):
                self._hidden_at.append(index)
            return True
        item_id = obj.get("item_id")
        if item_id is None and isinstance(item, dict):
            item_id = item.get("id")
        return item_id is not None and item_id in self._hidden

    def rewrite(self, obj: dict[str, Any], attempt: Attempt) -> dict[str, Any] | None:
        """A reissue's event (or any event, when reasoning is hidden) as the client sees
        it, or None to drop it."""
        kind = obj.get("type")
        if self.hide and self._hidden_item(kind, obj):
            return None
        if (kind in ("response.created", "response.in_progress") and attempt.number
                and self.response is not None):
            return None
        if "sequence_number" in obj:
            if self.sequence is None:  # the client has no numbered event yet
                self.sequence = -1
            self._number(obj)
        index = obj.get("output_index")
        if isinstance(index, int):
            below = sum(1 for hidden in self._hidden_at if hidden < index)
            obj["output_index"] = index - below + self._offset
        if kind in _ENDS:
            response = obj.get("response")
            if isinstance(response, dict):
                obj["response"] = self._final(response, attempt)
        return obj

    def _final(self, response: dict[str, Any], attempt: Attempt) -> dict[str, Any]:
        """A reissue's final response object with the client's identity, request echo,
        every item and the usage of every attempt."""
        out = dict(response)
        if self.response is not None:
            out["id"] = self.response.get("id")
            out["created_at"] = self.response.get("created_at")
        if "reasoning" in out:
            out["reasoning"] = self._echo.get("reasoning")
        output = response.get("output")
        items = output if isinstance(output, list) else []
        if self.hide:
            items = [i for i in items if not (isinstance(i, dict) and i.get("type") == "reasoning")]
        out["output"] = self.done[: self._done_before] + items
        usage = response.get("usage")
        if isinstance(usage, dict):
            out["usage"] = summed_usage(usage, attempt)
        return out

    # -- the sidecar's own events ----------------------------------------------------

    def _stamp(self, obj: dict[str, Any]) -> None:
        self._number(obj)
        if not self.indexed:
            obj.pop("output_index", None)

    def _close(self, attempt: Attempt) -> list[dict[str, Any]]:
        """The events that close the item a cut left open, with status ``incomplete``."""
        attempt.settle()  # the held deltas' texts, into ``kept``
        if attempt.number == 0 and not self.hide:
            # Forwarded as it came: the upstream's numbers are the client's.
            self.sequence = (attempt.upstream_sequence if isinstance(attempt, EventAttempt)
                             else None)
        item = self.open
        if item is None:
            return []
        text = self.kept.text()
        out: list[dict[str, Any]] = []
        index, item_id, ci = item.index, item.item.get("id"), item.content_index
        kind = item.item.get("type")
        done = copy.copy(item.item)
        if kind == "reasoning":
            if isinstance(item_id, str):
                self.marks.append(item_id)
            content = [{"text": text, "type": "reasoning_text"}]
            if item.part is not None:
                out.append({"content_index": ci, "item_id": item_id, "output_index": index,
                            "sequence_number": None, "text": text,
                            "type": "response.reasoning_text.done"})
                out.append({"content_index": ci, "item_id": item_id, "output_index": index,
                            "part": content[0], "sequence_number": None,
                            "type": "response.content_part.done"})
            done.update(content=content, status="incomplete")
        elif kind == "message":
            if attempt.inline_open(0):
                out.append({"content_index": ci, "delta": "</think>", "item_id": item_id,
                            "logprobs": [], "output_index": index, "sequence_number": None,
                            "type": "response.output_text.delta"})
                text += "</think>"
            part: dict[str, Any] = {"annotations": [], "text": text, "type": "output_text",
                                    "logprobs": None}
            if item.part is not None:
                out.append({"content_index": ci, "item_id": item_id, "logprobs": [],
                            "output_index": index, "sequence_number": None, "text": text,
                            "type": "response.output_text.done"})
                out.append({"content_index": ci, "item_id": item_id, "output_index": index,
                            "part": part, "sequence_number": None,
                            "type": "response.content_part.done"})
            done.update(content=[part] if item.part is not None else [], status="incomplete")
        elif kind == "function_call":
            out.append({"arguments": text, "item_id": item_id, "output_index": index,
                        "sequence_number": None, "type": "response.function_call_arguments.done",
                        "name": item.item.get("name")})
            done.update(arguments=text, status="incomplete")
        else:
            done["status"] = "incomplete"
        out.append({"item": done, "output_index": index, "sequence_number": None,
                    "type": "response.output_item.done"})
        return out

    def cut(self, attempt: Attempt, verdict: Verdict, action: str, number: int,
            open_choices: Sequence[int], *, wall: float) -> bytes:
        out = self._emit(self._close(attempt), comment(verdict, action, number))
        self._offset = self.items
        self._done_before = len(self.done)
        self._hidden_at = []  # the next attempt numbers its items from 0 again
        return out

    def end(self, attempt: Attempt, verdict: Verdict, action: str, number: int,
            open_choices: Sequence[int], totals: Totals, *, usage: bool, elapsed: float,
            wall: float) -> bytes:
        objs = self._close(attempt)
        response = dict(self.response) if self.response is not None else {
            "id": f"resp_{self._request_id}", "created_at": int(wall), "model": self._model,
            "object": "response", "output": [], "status": "in_progress", "usage": None}
        response.update(status="incomplete", incomplete_details={"reason": "max_output_tokens"},
                        usage=usage_object(totals.usage()["prompt_tokens"],
                                           totals.completion_tokens, totals.reasoning_tokens))
        done_now = self.done + [o["item"] for o in objs
                                if o["type"] == "response.output_item.done"]
        response["output"] = done_now
        objs.append({"response": response, "sequence_number": None,
                     "type": "response.completed"})
        return self._emit(objs, comment(verdict, action, number))

    def error(self, err: UpstreamError) -> bytes:
        obj: dict[str, Any] = {"code": str(err.status), "message": str(err), "param": None,
                               "sequence_number": None, "type": "error"}
        self._number(obj)
        return encode(obj)


def summed_usage(usage: dict[str, Any], attempt: Attempt) -> dict[str, Any]:
    """A reissue's final usage with every earlier attempt's tokens added: the prompt once
    per attempt, every token generated, every reasoning token."""
    earlier = attempt.earlier
    out = dict(usage)
    prompt = token_count(out.get("input_tokens"))
    out["input_tokens"] = prompt + earlier.prompt_tokens + earlier.unknown_prompts * prompt
    out["output_tokens"] = token_count(out.get("output_tokens")) + earlier.completion_tokens
    details = out.get("output_tokens_details")
    if isinstance(details, dict):
        out["output_tokens_details"] = {
            **details, "reasoning_tokens": token_count(details.get("reasoning_tokens"))
            + earlier.reasoning_tokens}
    out["total_tokens"] = out["input_tokens"] + out["output_tokens"]
    return out
