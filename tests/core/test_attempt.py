"""The format-neutral books of a watched attempt (``sidecar.core.attempt``): the bounded
text a choice keeps for salvage (``KeptText``, which a Responses splicer keeps its open
item's text in as well); its usage, and the totals carried from attempt to attempt (fed
through the chat API's attempt as the I/O layer makes it, ``WireApi.open``)."""

from __future__ import annotations

import dataclasses
import gc
from pathlib import Path
from typing import Any

import orjson
import pytest

from detectors import DetectorConfig, default_chain
from sidecar.apis.openai.api import CHAT
from sidecar.core.attempt import Attempt, AttemptSpec, ChoiceState, Totals
from sidecar.core.kept import MAX_KEPT_REASONING, KeptText
from sidecar.dialects import DIALECTS

LLAMACPP = Path(__file__).parent.parent / "data" / "captures" / "llama.cpp"


def _state() -> ChoiceState:
    """A choice of an attempt that keeps its reasoning for salvage."""
    return ChoiceState(default_chain(DetectorConfig()), reasoning=KeptText())


def _keep(state: ChoiceState, text: str) -> None:
    """Keep ``text`` as the attempt keeps a thinking delta."""
    assert state.reasoning is not None
    state.reasoning.keep(text)


def _strings(state: ChoiceState) -> list[str]:
    """Every string the choice's kept reasoning holds, found by walking what it refers to
    (lists and the sidecar's own objects), whatever their arrangement."""
    found: list[str] = []
    todo: list[Any] = [getattr(state, f.name) for f in dataclasses.fields(state)
                       if f.name != "chain"]
    while todo:
        obj = todo.pop()
        if isinstance(obj, str):
            found.append(obj)
        elif isinstance(obj, list | tuple) or type(obj).__module__.startswith("sidecar."):
            todo.extend(gc.get_referents(obj))
    return found


@pytest.mark.parametrize("delta", ["a", "abcd", "token "])
def test_kept_reasoning_is_copied_a_few_times_not_once_per_join(delta: str) -> None:
    """Kept up to the bound delta by delta, the reasoning's characters are copied into
    joined strings a few times over in all, not all of it again every few deltas (which
    re-read up to 32 KiB per join: hundreds of times the text for one-character deltas).
    What is kept is the text, whole and in order."""
    state = _state()
    seen: dict[int, str] = {}  # every string held so far, kept alive so ids stay unique
    copied = 0
    count = MAX_KEPT_REASONING // len(delta) + 100
    for _ in range(count):
        _keep(state, delta)
        for text in _strings(state):
            if id(text) not in seen:
                seen[id(text)] = text
                if text is not delta:
                    copied += len(text)
    kept = state.reasoning_text()
    assert kept == delta * (MAX_KEPT_REASONING // len(delta) + (
        1 if MAX_KEPT_REASONING % len(delta) else 0))
    assert copied <= 8 * len(kept)


def test_kept_reasoning_is_the_deltas_in_order_in_few_strings() -> None:
    """Token-sized deltas come back joined and in order, held in a handful of strings
    (fewer than two per ``_KEEP_JOIN`` of them), however many came."""
    state = _state()
    pieces = [f" w{i}" for i in range(5000)]
    for piece in pieces:
        _keep(state, piece)
    assert state.reasoning_text() == "".join(pieces)
    assert state.reasoning is not None
    assert len(state.reasoning) == len("".join(pieces))
    assert len(_strings(state)) < 2 * 64


def test_kept_reasoning_stops_at_the_cap() -> None:
    """Past ``MAX_KEPT_REASONING`` characters nothing more is kept (at most one delta over)."""
    state = _state()
    for _ in range(MAX_KEPT_REASONING // 4 + 500):
        _keep(state, "abcd")
    text = state.reasoning_text()
    assert MAX_KEPT_REASONING <= len(text) < MAX_KEPT_REASONING + 4
    assert text == "abcd" * (len(text) // 4)


def test_a_cleared_keeper_starts_over_and_stays_the_one_bound() -> None:
    """``clear`` empties a keeper in place: a ``keep`` bound before (as an attempt binds
    its splicer's) keeps into the same, emptied text."""
    kept = KeptText()
    keep = kept.keep
    for _ in range(MAX_KEPT_REASONING):
        keep("x")
    kept.clear()
    keep("new")
    assert (kept.text(), len(kept)) == ("new", 3)


# -- usage and totals ---------------------------------------------------------------


def attempt(n: int, earlier: Totals | None = None) -> Attempt:
    """A first attempt of a streaming chat request for ``n`` choices."""
    facts = CHAT.facts({"model": "m", "stream": True, "n": n, "messages": []})
    opened = CHAT.open(facts, DIALECTS["vllm"], request_id="r", model="m")
    return opened.attempt(AttemptSpec(number=0, detectors=DetectorConfig(), started_at=0.0,
                                      exchange_started=0.0, earlier=earlier or Totals()))


def chunk(choices: list[dict[str, Any]], usage: dict[str, int] | None = None) -> bytes:
    obj: dict[str, Any] = {"id": "c", "object": "chat.completion.chunk", "created": 1,
                           "model": "m", "choices": choices}
    if usage is not None:
        obj["usage"] = usage
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def test_per_choice_usage_is_summed() -> None:
    """llama.cpp ends each of ``n`` choices with a usage chunk of its own
    (``chat_n2.sse``): the attempt's usage is their sum, not the last one's."""
    one = attempt(2)
    one.feed((LLAMACPP / "chat_n2.sse").read_bytes(), 0.0)
    assert one.usage is not None
    assert (one.usage.prompt_tokens, one.usage.completion_tokens) == (2 * 27, 2 * 24)
    assert one.totals().completion_tokens == 2 * 24


def test_cumulative_usage_is_not_summed() -> None:
    """vLLM's cumulative usage on every chunk, then its one final usage: the final one."""
    one = attempt(1)
    for tokens in (1, 2):
        one.feed(chunk([{"index": 0, "delta": {"content": "x"}}],
                       {"prompt_tokens": 7, "completion_tokens": tokens}), 0.0)
    one.feed(chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}]), 0.0)
    one.feed(chunk([], {"prompt_tokens": 7, "completion_tokens": 2}), 0.0)
    assert one.usage is not None
    assert (one.usage.prompt_tokens, one.usage.completion_tokens) == (7, 2)


def test_a_cut_attempt_without_usage_bills_the_prompt_estimate() -> None:
    """An attempt cut before any usage, when none reported one: billed the estimate the
    exchange started with (``Totals.last_prompt``)."""
    first = attempt(1, Totals(last_prompt=40))
    first.feed(chunk([{"index": 0, "delta": {"reasoning": "Hmm"}}]), 0.0)
    books = first.totals()
    assert books.usage()["prompt_tokens"] == 40
    assert books.usage()["total_tokens"] == 40 + books.completion_tokens == 41


@pytest.mark.parametrize(("totals", "prompt"), [
    (Totals(), 0),
    (Totals(unknown_prompts=2, last_prompt=30), 60),  # two cut attempts, estimated
    (Totals(prompt_tokens=25, unknown_prompts=1, last_prompt=25), 50),  # one reported
])
def test_totals_bill_the_prompt_once_per_attempt(totals: Totals, prompt: int) -> None:
    """The prompt is billed once per attempt, at the size the last report (or, before any,
    the estimate) gave."""
    assert totals.usage()["prompt_tokens"] == prompt
