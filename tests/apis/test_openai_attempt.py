"""The OpenAI chunk attempt (``sidecar.apis.openai.attempt``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from detectors import DetectorConfig
from sidecar.apis.openai.chunks import ChunkKind
from sidecar.errors import UpstreamProtocolError
from tests.attempts import chunk_attempt
from tests.conftest import CAPTURES


def _reasoning_stream(pieces: list[str]) -> bytes:
    chunks = [
        b"data: " + orjson.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk",
                                  "created": 1, "model": "m", "choices": [{
                                      "index": 0, "delta": {"reasoning": piece},
                                      "finish_reason": None}]}) + b"\n\n"
        for piece in pieces
    ]
    return b"".join(chunks)


def test_attempt_keeps_reasoning_only_when_asked() -> None:
    """An attempt made with ``keep_reasoning=False`` (no salvage step in the ladder) counts
    and watches the reasoning but keeps none of it; the default keeps it for salvage."""
    pieces = [f" step{i}" for i in range(300)]
    stream = _reasoning_stream(pieces)
    kept = chunk_attempt("chat")
    dropped = chunk_attempt("chat", keep_reasoning=False)
    for attempt in (kept, dropped):
        assert attempt.feed(stream, 1.0) == stream
        assert attempt.choices[0].thinking_tokens == len(pieces)
        assert attempt.verdict is None
    assert kept.reasoning_of(0) == "".join(pieces)
    assert dropped.reasoning_of(0) == ""
    assert dropped.choices[0].reasoning is None  # no keeper made


def test_a_recorded_attempt_keeps_its_reasoning_as_blocks_and_past_a_verdict() -> None:
    """``record_chars`` keeps each choice's first that many characters of reasoning for
    the recorder: as the chain's blocks (no keeper per delta), and in shadow mode (the
    stream goes on after a verdict) delta by delta from the verdict on; it says whether
    more came. Salvage still reads its own ``MAX_KEPT_REASONING``."""
    pieces = [f" step {i:05d}." for i in range(300)]  # then a loop, 60,000 characters
    pieces += [" I will check the ferry schedule once more, carefully."] * 1030
    whole = "".join(pieces)
    stream = _reasoning_stream(pieces)
    shadow = chunk_attempt("chat", keep_reasoning=False, record_chars=50_000,
                           stop_on_verdict=False)
    assert shadow.feed(stream, 1.0) == stream
    assert shadow.verdict is not None
    assert shadow.verdict.at_char < 10_000
    assert shadow.recorded_reasoning(0) == (whole[:50_000], True)
    whole_shadow = chunk_attempt("chat", keep_reasoning=False, record_chars=100_000,
                                 stop_on_verdict=False)
    whole_shadow.feed(stream, 1.0)
    assert whole_shadow.recorded_reasoning(0) == (whole, False)
    # enforce (the stream stops at the verdict), with and without salvage's own keeper
    for salvage in (False, True):
        enforce = chunk_attempt("chat", keep_reasoning=salvage, record_chars=100_000)
        enforce.feed(stream, 1.0)
        assert enforce.verdict is not None
        text, more = enforce.recorded_reasoning(0)
        assert not more  # what the attempt read before it stopped is all kept
        assert whole.startswith(text)
        assert enforce.verdict.at_char <= len(text) < enforce.verdict.at_char + 300
        assert (enforce.choices[0].reasoning is None) is not salvage
        assert whole.startswith(enforce.reasoning_of(0))
    quiet = chunk_attempt("chat", keep_reasoning=False, stop_on_verdict=False)
    quiet.feed(stream, 1.0)
    assert quiet.recorded_reasoning(0) == ("", False)
    assert quiet.choices[0].recorded is None


def test_a_recorded_attempt_without_text_detectors_keeps_deltas() -> None:
    """With no text detector on thinking there are no blocks to keep: the deltas are."""
    pieces = [f" step {i:05d}." for i in range(500)]
    off = DetectorConfig(recurrence_enabled=False, periodic_enabled=False,
                         restatement_enabled=False, sentences_enabled=False,
                         degeneration_enabled=False)
    attempt = chunk_attempt("chat", keep_reasoning=False, record_chars=4_000, detectors=off)
    attempt.feed(_reasoning_stream(pieces), 1.0)
    text, more = attempt.recorded_reasoning(0)
    assert (text, more) == ("".join(pieces)[:4_000], True)


def _events(data: bytes) -> list[bytes]:
    """``data`` cut after every blank line: one SSE event per piece (LF framing)."""
    return [piece + b"\n\n" for piece in data.split(b"\n\n")[:-1]]


def _watched(route: ChunkKind, reads: list[bytes], detectors: DetectorConfig,
             stop: bool) -> tuple[Any, ...]:
    """Everything a caller can see of an attempt fed ``reads`` (all at the same time)."""
    attempt = chunk_attempt(route, detectors=detectors, stop_on_verdict=stop)
    out = b""
    for read in reads:
        out += attempt.feed(read, 1.0)
        if attempt.stopped:
            break
    else:
        out += attempt.eof(1.0)
    verdict = attempt.verdict
    return (
        out,
        None if verdict is None else (verdict.detector, verdict.channel, verdict.at_token,
                                      verdict.at_char, verdict.evidence),
        attempt.verdict_index, attempt.counted_tokens, attempt.usage, attempt.done,
        attempt.error, attempt.first_content_at, attempt.head, attempt.open_choices,
        {i: (c.thinking_tokens, c.content_tokens, c.finished, c.reasoning_text())
         for i, c in attempt.choices.items()},
    )


@pytest.mark.parametrize("name", sorted(p.name for p in CAPTURES.glob("*.sse")))
@pytest.mark.parametrize(("detectors", "stop"), [
    (DetectorConfig(), True),
    (DetectorConfig(), False),
    (DetectorConfig(thinking_token_budget=40), True),
])
def test_one_event_per_read_sees_what_one_big_read_sees(name: str, detectors: DetectorConfig,
                                                        stop: bool) -> None:
    """Real vLLM streams (thinking loops that fire, ``n=2``, usage on every chunk, inline
    ``<think>`` tags, a thinking budget) fed one event per read, which takes the attempt's
    short path for a chunk of a learned shape, leave it exactly as the same bytes fed as
    one read or in uneven pieces, which go through the SSE decoder and the stream model's
    events: the bytes forwarded, the verdict and where it fired, every count and flag."""
    data = (CAPTURES / name).read_bytes()
    route: ChunkKind = "completions" if name.startswith("completions") else "chat"
    events = _events(data)
    assert b"".join(events) == data
    one_by_one = _watched(route, events, detectors, stop)
    assert one_by_one == _watched(route, [data], detectors, stop)
    uneven = [data[i : i + 37] for i in range(0, len(data), 37)]
    assert one_by_one == _watched(route, uneven, detectors, stop)
    assert one_by_one[0]  # something was forwarded


_HEAD = b'data: {"id":"c-1","choices":[{"index":0,"delta":{"reasoning":'
_TAIL = b'},"logprobs":null,"finish_reason":null}]}\n\n'


def _think(text: bytes) -> bytes:
    return _HEAD + b'"' + text + b'"' + _TAIL


@pytest.mark.parametrize("odd", [
    _think(b"a") + _think(b"b"),  # two events of the learned shape in one read
    _think(b"a")[:-1] + b"\r\n",  # an LF, then a CRLF
    _think(b"a").replace(b"data: ", b"data:"),  # no space after the colon
    _think(b"a").replace(b"data: ", b"event:"),  # another field, as long as "data: "
    _think(b"a")[:-2] + b"\n:",  # no blank line yet: the event goes on in the next read
    b": keep-alive\n\n" + _think(b"a"),  # a comment first
    _think(b"a").replace(b'"a"', b'"a\nb"'),  # a line break inside the text: not one event
    _think(b"a").replace(b'"a"', b'"a\rb"'),  # a CR inside the text
    _think(b"a")[:30],  # half an event; the next read starts in its middle
])
def test_a_read_that_only_looks_like_a_learned_event_is_read_in_full(odd: bytes) -> None:
    """After a template is learned, a read whose bytes start and end like one event of
    its shape but are not exactly one single-line ``data:`` event (two events, CR line
    ends, another framing, a line break inside, a pending half event) gives what the
    same bytes give as one read, which never takes the short path: the bytes forwarded,
    every count and flag, or the same protocol error."""
    reads = [_think(b"w%d" % i) for i in range(4)] + [odd, _think(b"x"), _think(b"y")]

    def seen(pieces: list[bytes]) -> Any:
        try:
            return _watched("chat", pieces, DetectorConfig(), True)
        except UpstreamProtocolError as exc:
            return ("error", str(exc))

    assert seen(reads) == seen([b"".join(reads)])


def test_a_payload_of_several_data_lines_teaches_no_template() -> None:
    """Events whose JSON spans two ``data:`` lines are read in full and teach no shape;
    else a later read with the same bytes but no ``data:`` on its second line (a field of
    another name, so the payload is cut short: a protocol error) would pass as text."""
    head = b'data: {"id":"c-1","choices":[{"index":0,\ndata: "delta":{"reasoning":'
    reads = [head + b'"w%d"' % i + _TAIL for i in range(4)]
    reads.append(reads[0].replace(b"\ndata: ", b"\n"))
    attempt = chunk_attempt("chat")
    for read in reads[:4]:
        assert attempt.feed(read, 1.0) == read
    assert attempt.choices[0].thinking_tokens == 4
    with pytest.raises(UpstreamProtocolError):
        attempt.feed(reads[4], 1.0)


def _trace_stream(text: str, route: ChunkKind) -> bytes:
    """A real trace as a vLLM stream of 4-character deltas: on chat the thinking in
    ``reasoning`` and the answer in ``content``; on completions all of it in ``text``,
    ``<think>`` tags included, as a server without a reasoning parser sends it."""
    thinking, _, answer = text.removeprefix("<think>").partition("</think>")
    if route == "chat":
        deltas = [{"reasoning": thinking[i : i + 4]} for i in range(0, len(thinking), 4)]
        deltas += [{"content": answer[i : i + 4]} for i in range(0, len(answer), 4)]
        choices = [{"index": 0, "delta": d, "logprobs": None, "finish_reason": None}
                   for d in deltas]
    else:
        choices = [{"index": 0, "text": text[i : i + 4], "logprobs": None,
                    "finish_reason": None} for i in range(0, len(text), 4)]
    last = {**choices[-1], "finish_reason": "stop"}
    return b"".join(
        b"data: " + orjson.dumps({"id": "x-1", "object": "chunk", "created": 1, "model": "m",
                                  "choices": [choice]}) + b"\n\n"
        for choice in [*choices[:-1], last]) + b"data: [DONE]\n\n"


@pytest.mark.parametrize(("label", "line"), [("loops", 16), ("healthy", 0)])
@pytest.mark.parametrize("route", ["chat", "completions"])
@pytest.mark.parametrize("stop", [True, False])
def test_one_event_per_read_judges_real_traces_as_one_big_read(
        label: str, line: int, route: ChunkKind, stop: bool) -> None:
    """The same for real traces, where the text detectors fire (a QwQ loop, caught about
    10,000 characters in) or stay quiet to the answer (a healthy trace): the same verdict
    at the same token and character."""
    lines = (Path(__file__).parents[1] / "data" / "traces" / f"{label}.jsonl").read_text(
        encoding="utf-8").splitlines()
    data = _trace_stream(orjson.loads(lines[line])["text"], route)
    one_by_one = _watched(route, _events(data), DetectorConfig(), stop)
    assert one_by_one == _watched(route, [data], DetectorConfig(), stop)
    assert (one_by_one[1] is not None) == (label == "loops")


def test_a_stopped_attempt_forwards_nothing_more() -> None:
    """Once a verdict stops the attempt, whatever still arrives is dropped, on the short
    path for a whole event of a learned shape as on the general one."""
    events = _events((CAPTURES / "chat_thinking_loop_usage.sse").read_bytes())
    attempt = chunk_attempt("chat", detectors=DetectorConfig(thinking_token_budget=5))
    fed = 0
    while not attempt.stopped:
        assert attempt.feed(events[fed], 1.0)
        fed += 1
    assert attempt.verdict is not None
    assert attempt.verdict.detector == "thinking_token_budget"
    assert attempt.feed(events[fed], 1.0) == b""  # one whole event
    assert attempt.feed(b"".join(events[fed : fed + 3]), 1.0) == b""
