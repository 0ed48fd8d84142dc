"""Thinking deltas an attempt holds back (``Attempt._hold``) change nothing a caller sees.

A first attempt to a streaming client reads most thinking deltas through a template and
holds them until one could reach a verdict. Each test feeds the same real stream, one
event per read, to such an attempt and to one that applies every delta as it comes (on
chat: each event in two reads, through the SSE decoder; on Messages and Responses: an
attempt that parses every event in full), and compares the bytes forwarded, the verdict
(its detector, token and character), the event it stopped at, and every count, with the
text detectors, each budget, and a verdict that does not stop the attempt (shadow)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from detectors import DetectorConfig
from sidecar.apis.messages.attempt import MessagesAttempt
from sidecar.apis.messages.splice import MessagesSplicer
from sidecar.apis.responses.attempt import ResponsesAttempt
from sidecar.apis.responses.splice import ResponsesSplicer
from sidecar.core.attempt import Attempt, AttemptSpec
from tests.apis import messages_events as msg
from tests.apis import responses_events as rsp
from tests.attempts import chunk_attempt

TRACES = Path(__file__).parents[1] / "data" / "traces"
#: Seconds between two events: 20 tokens per second.
STEP = 0.05


def _trace(label: str, line: int) -> tuple[str, str]:
    """The thinking and the answer of one real trace."""
    text = orjson.loads((TRACES / f"{label}.jsonl").read_text(
        encoding="utf-8").splitlines()[line])["text"]
    thinking, _, answer = text.removeprefix("<think>").partition("</think>")
    return thinking, answer or "Done."


def _pieces(text: str) -> list[str]:
    return [text[i : i + 4] for i in range(0, len(text), 4)]


def _stream(api: str, thinking: str, answer: str) -> list[bytes]:
    """The trace as ``api``'s stream (4-character deltas), one event per item."""
    if api == "chat":
        deltas = [{"reasoning": p} for p in _pieces(thinking)]
        deltas += [{"content": p} for p in _pieces(answer)]
        events = [b"data: " + orjson.dumps({
            "id": "c-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": d, "logprobs": None, "finish_reason": None}],
        }) + b"\n\n" for d in deltas]
        return [*events, b"data: [DONE]\n\n"]
    if api == "messages":
        objs = [msg.start(), msg.block(0, "thinking"),
                *(msg.delta(0, "thinking", p) for p in _pieces(thinking)), msg.stop(0),
                msg.block(1, "text"), *(msg.delta(1, "text", p) for p in _pieces(answer)),
                msg.stop(1), *msg.end("end_turn", 32, 9)]
        return [msg.sse([obj]) for obj in objs]
    objs = [*rsp.head(), *rsp.reasoning(0, "rs_1", *_pieces(thinking)),
            *rsp.message(1, "msg_1", *_pieces(answer)),
            rsp.completed([], rsp.usage(32, 9, 5))]
    return [rsp.sse([obj], first=number) for number, obj in enumerate(objs)]


def _attempt(api: str, detectors: DetectorConfig, stop: bool, *, held: bool) -> Attempt:
    """A first attempt to a streaming client; ``held=False``: one that parses every event
    in full, so holds nothing (on chat the reads do that instead, see ``_reads``)."""
    if api == "chat":
        return chunk_attempt("chat", detectors=detectors, stop_on_verdict=stop)
    parts = (msg if api == "messages" else rsp).opened()
    spec = AttemptSpec(0, detectors, 0.0, 0.0, stop_on_verdict=stop, keep_reasoning=True)
    if held:
        return parts.attempt(spec)
    splicer = parts.splicer
    if isinstance(splicer, MessagesSplicer):
        return MessagesAttempt(spec, splicer, None, templates=False)
    assert isinstance(splicer, ResponsesSplicer)
    return ResponsesAttempt(spec, splicer, None, templates=False)


def _watched(api: str, events: list[bytes], detectors: DetectorConfig, stop: bool, *,
             held: bool) -> tuple[Any, ...]:
    """What a caller sees of an attempt fed ``events``, event ``i`` at ``i * STEP`` s."""
    attempt = _attempt(api, detectors, stop, held=held)
    out: list[bytes] = []
    stopped_at = None
    for number, event in enumerate(events):
        now = number * STEP
        # On chat, an event in two reads goes through the SSE decoder: nothing is held.
        reads = [event] if held or api != "chat" else [event[:1], event[1:]]
        out.append(b"".join(attempt.feed(read, now) for read in reads))
        if attempt.stopped:
            stopped_at = number
            break
    else:
        out.append(attempt.eof(len(events) * STEP))
    verdict = attempt.verdict
    splicer = getattr(attempt, "splicer", None)
    kept = splicer.kept.text() if isinstance(splicer, ResponsesSplicer) else None
    return (
        out, stopped_at, kept,
        None if verdict is None else (verdict.detector, verdict.channel, verdict.at_token,
                                      verdict.at_char, verdict.evidence),
        attempt.counted_tokens, attempt.thinking_tokens, attempt.done, attempt.totals(),
        {i: (c.thinking_tokens, c.content_tokens, c.finished, c.reasoning_seen,
             c.reasoning_head, c.reasoning_text()) for i, c in attempt.choices.items()},
    )


@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
@pytest.mark.parametrize(("label", "line", "detectors", "stop", "fires"), [
    ("loops", 16, DetectorConfig(), True, "sentences"),
    ("loops", 16, DetectorConfig(), False, "sentences"),
    ("healthy", 0, DetectorConfig(), True, None),
    ("healthy", 0, DetectorConfig(thinking_token_budget=333), True, "thinking_token_budget"),
    ("healthy", 0, DetectorConfig(thinking_seconds_budget=7.0), True,
     "thinking_seconds_budget"),
])
def test_held_deltas_change_nothing_a_caller_sees(
        api: str, label: str, line: int, detectors: DetectorConfig, stop: bool,
        fires: str | None) -> None:
    """The same bytes, verdict, stopping event, counts, kept texts and reasoning head,
    whether the thinking deltas were held or each applied as it came."""
    thinking, answer = _trace(label, line)
    events = _stream(api, thinking, answer)
    held = _watched(api, events, detectors, stop, held=True)
    assert held == _watched(api, events, detectors, stop, held=False)
    verdict = held[3]
    assert (verdict and verdict[0]) == fires
    if fires == "thinking_token_budget":
        assert verdict[2] == 333  # the budget's own token, not a held one later
    if fires is not None and stop:
        assert held[1] is not None
        assert held[1] < len(events) - 1  # cut mid-stream


def test_an_attempt_holds_deltas_only_while_no_verdict_can_come() -> None:
    """Held deltas are applied as one once a delta could complete a block: the state
    a caller reads is always complete, and the attempt holds some deltas at all."""
    thinking, answer = _trace("healthy", 0)
    events = _stream("responses", thinking, answer)
    attempt = _attempt("responses", DetectorConfig(), True, held=True)
    held_at_most = 0
    for number, event in enumerate(events[:300]):
        attempt.feed(event, number * STEP)
        held_at_most = max(held_at_most, len(attempt._held))
        assert attempt._held_chars < 256
    assert held_at_most > 8  # deltas were held: the short path was taken
    reasoning = [orjson.loads(e.split(b"data: ", 1)[1]) for e in events[:300]]
    seen = sum(len(r["delta"]) for r in reasoning if r["type"].endswith("reasoning_text.delta"))
    assert attempt.choices[0].reasoning_seen == seen  # the reader settled first
    assert not attempt._held
