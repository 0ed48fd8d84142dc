"""The OpenAI chunk decoder (``sidecar.apis.openai.chunks``): typed events per choice from
real vLLM chunks and inline-tag streams."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.apis.openai.chunks import StreamModel
from sidecar.codecs.sse import SSEDecoder
from sidecar.core.events import (
    Done,
    Finish,
    MalformedChunk,
    StreamError,
    StreamEvent,
    TextDelta,
    ThinkTagSplitter,
    ToolCallDelta,
    Usage,
)
from tests.apis.plain_reads import record_plain_reads

CAPTURES = Path(__file__).parent.parent / "data" / "captures" / "vllm-0.32.0"


def events_of(name: str, route: str = "chat") -> list[object]:
    dec = SSEDecoder()
    model = StreamModel(route)  # type: ignore[arg-type]
    out: list[object] = []
    for ev in dec.feed((CAPTURES / name).read_bytes()):
        assert ev.data is not None
        out += model.feed(ev.data)
    return out


def text(events: list[object], channel: str, index: int = 0) -> str:
    return "".join(e.text for e in events
                   if isinstance(e, TextDelta) and e.channel == channel and e.index == index)


def test_thinking_loop_capture() -> None:
    """Reasoning deltas become thinking text; finish and final usage are typed events."""
    events = events_of("chat_thinking_loop_usage.sse")
    assert text(events, "thinking").startswith(" Hmm, maybe my earlier reasoning")
    assert text(events, "content") == ""
    assert Finish(0, "length") in events
    usage = [e for e in events if isinstance(e, Usage)]
    assert usage == [Usage(9, 48, 47, final=True)]
    assert isinstance(events[-1], Done)


def test_tokens_counted_per_chunk_without_usage() -> None:
    """Without continuous usage each chunk that carries text counts as one token."""
    events = events_of("chat_thinking_loop_usage.sse")
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert sum(d.tokens for d in deltas) == 47  # reasoning_tokens reported by vLLM


def test_tokens_from_continuous_usage() -> None:
    """With continuous_usage_stats the token count follows vLLM's cumulative usage."""
    events = events_of("chat_thinking_loop_continuous_usage.sse")
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert sum(d.tokens for d in deltas) == 48  # completion_tokens, the <think> token included


def test_thinking_budget_switches_to_content() -> None:
    """After vLLM's thinking budget the same loop continues as content."""
    events = events_of("chat_thinking_token_budget_20.sse")
    assert text(events, "thinking").count("Hmm") == 1
    assert text(events, "content").startswith(" Hmm, maybe")


def test_n2_tracks_choices_separately() -> None:
    """With n=2 each choice index gets its own text and finish."""
    events = events_of("chat_n2.sse")
    assert text(events, "thinking", 0) == text(events, "thinking", 1)
    assert {e.index for e in events if isinstance(e, Finish)} == {0, 1}


def test_completions_text_is_content() -> None:
    """On /v1/completions the generated text is watched (special tags are not in it)."""
    events = events_of("completions_raw_think_tags.sse", route="completions")
    assert text(events, "content").startswith(" Hmm, maybe my")


def test_error_event() -> None:
    """An in-stream error object becomes a StreamError."""
    model = StreamModel("chat")
    body = b'{"error":{"message":"Internal server error","type":"InternalServerError",'
    body += b'"param":null,"code":500}}'
    assert model.feed(body) == [StreamError("Internal server error", 500)]


def test_reasoning_content_and_tool_calls() -> None:
    """``reasoning_content`` (older vLLM, SGLang, llama.cpp) and tool calls are understood."""
    model = StreamModel("chat")
    chunk = {"choices": [{"index": 0, "delta": {"reasoning_content": "hm",
                                                "tool_calls": [{"index": 0, "id": "c1"}]}}]}
    events = model.feed(orjson.dumps(chunk))
    assert events == [TextDelta(0, "thinking", "hm", 1),
                      ToolCallDelta(0, [{"index": 0, "id": "c1"}])]


@pytest.mark.parametrize("payload", [b"{", b"[]", b'{"choices": 3}', b'{"choices":[1]}',
                                     b'{"choices":[{"index":"x"}]}'])
def test_malformed_chunks(payload: bytes) -> None:
    """Payloads that are not chunks raise MalformedChunk, never something else."""
    with pytest.raises(MalformedChunk):
        StreamModel("chat").feed(payload)


def test_inline_tags_split_across_chunks() -> None:
    """Inline ``<think>`` tags split anywhere route text to the right channel."""
    model = StreamModel("chat")
    pieces = ["<th", "ink>plan", " more</", "think>", "answer"]
    events: list[object] = []
    for piece in pieces:
        chunk = {"choices": [{"index": 0, "delta": {"content": piece}}]}
        events += model.feed(orjson.dumps(chunk))
    assert text(events, "thinking") == "plan more"
    assert text(events, "content") == "answer"


def test_lone_close_tag_ends_prefilled_thinking() -> None:
    """Templates that pre-fill ``<think>`` produce only ``</think>``; the splitter follows."""
    splitter = ThinkTagSplitter(in_think=True)
    assert splitter.split("reason</think>answer") == [("thinking", "reason"),
                                                      ("content", "answer")]


def test_splitter_deltas_credit_the_tokens_to_the_first_piece() -> None:
    """``deltas`` appends one TextDelta per piece, the tokens on the first only, and hands
    the tokens back while every piece is held back (a partial tag)."""
    splitter = ThinkTagSplitter()
    out: list[StreamEvent] = []
    assert splitter.deltas(2, "<thi", 3, out) == 3
    assert out == []
    assert splitter.deltas(2, "nk>plan</think>fix", 3, out) == 0
    assert out == [TextDelta(2, "thinking", "plan", 3), TextDelta(2, "content", "fix", 0)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["<think>", "</think>", "<", "a", "b<c", "think>", "</"]),
                max_size=20),
       st.lists(st.integers(0, 200), max_size=10))
def test_splitter_independent_of_chunking(parts: list[str], cuts: list[int]) -> None:
    """However the text is split into deltas, the channels and texts are the same."""
    full = "".join(parts)

    def run(chunks: list[str]) -> list[tuple[str, str]]:
        sp = ThinkTagSplitter()
        pieces = [p for c in chunks for p in sp.split(c)] + sp.flush()
        merged: list[tuple[str, str]] = []
        for channel, t in pieces:
            if merged and merged[-1][0] == channel:
                merged[-1] = (channel, merged[-1][1] + t)
            else:
                merged.append((channel, t))
        return merged

    points = sorted({c % (len(full) + 1) for c in cuts})
    chunks, prev = [], 0
    for p in points:
        chunks.append(full[prev:p])
        prev = p
    chunks.append(full[prev:])
    assert run(chunks) == run([full])


# -- templates: a learned chunk shape reads only the text string ----------------------

def _payloads(name: str) -> list[bytes]:
    return [ev.data for ev in SSEDecoder().feed((CAPTURES / name).read_bytes())
            if ev.data is not None]


def _feed_all(model: StreamModel, payloads: list[bytes]) -> list[object]:
    out: list[object] = []
    for data in payloads:
        try:
            out += model.feed(data)
        except MalformedChunk as exc:
            out.append(("malformed", str(exc)))
    return out + model.flush()


@pytest.mark.parametrize(("name", "route", "least"), [
    ("chat_thinking_loop_usage.sse", "chat", 40),
    ("chat_thinking_token_budget_20.sse", "chat", 40),
    ("chat_thinking_off_answer.sse", "chat", 5),
    ("chat_n2.sse", "chat", 15),
    ("chat_vllm_repetition_detection.sse", "chat", 10),
    ("chat_thinking_loop_continuous_usage.sse", "chat", 0),
    ("completions_raw_think_tags.sse", "completions", 10),
])
def test_templates_give_the_events_of_a_full_parse(name: str, route: str, least: int) -> None:
    """On every vLLM capture the events with templates are those of a full parse, and
    most text chunks skip the full parse (none with continuous usage: each differs)."""
    payloads = _payloads(name)
    fast = StreamModel(route, templates=True)  # type: ignore[arg-type]
    assert _feed_all(fast, payloads) == _feed_all(StreamModel(route), payloads)  # type: ignore[arg-type]
    assert fast.templated >= least
    if least == 0:
        assert fast.templated == 0


def test_a_template_reads_escapes_and_gives_way_to_other_shapes() -> None:
    """Escaped text goes through the template; a quote or bad bytes in its place, another
    key or a finish are parsed in full, with the same events or error as without."""
    head = b'{"id":"x","choices":[{"index":0,"delta":{"reasoning":'
    tail = b'},"logprobs":null,"finish_reason":null}]}'
    payloads = [head + b'"a"' + tail, head + b'"\\n\\"q\\u00e9\\ud83d\\ude00"' + tail,
                head + b'"a","content":"b"' + tail, head + b'"\xff"' + tail,
                head + b'"\x01"' + tail, head + b'""' + tail, head + b'7' + tail,
                head + b'null' + tail, head + b'1234' + tail,
                head.replace(b"reasoning", b"content") + b'"ans<think>w"' + tail,
                head + b'"z"' + tail.replace(b"finish_reason\":null", b"finish_reason\":\"stop\""),
                head + b'"b' + tail]
    fast = StreamModel("chat", templates=True)
    got = _feed_all(fast, payloads)
    assert got == _feed_all(StreamModel("chat"), payloads)
    assert TextDelta(0, "thinking", '\n"q\u00e9\U0001f600', 1) in got
    assert fast.templated == 1  # only the escaped text: the rest differ in shape or bytes
    # Errors, as from a full parse: invalid UTF-8, a raw control character, no closing quote.
    assert sum(1 for e in got if isinstance(e, tuple)) == 3


def test_learning_stops_when_templates_never_match() -> None:
    """A stream whose every chunk differs around the text (a new id each time) stops
    learning after four unused templates, and its events stay those of a full parse."""
    payloads = [orjson.dumps({"id": f"c{i}", "choices": [{"index": 0, "delta": {"content": "w"}}]})
                for i in range(20)]
    fast = StreamModel("chat", templates=True)
    assert _feed_all(fast, payloads) == _feed_all(StreamModel("chat"), payloads)
    assert fast.templated == 0
    assert not fast.learning
    assert not StreamModel("chat").learning


@pytest.mark.parametrize(("extra", "templated"), [(900, 9), (1100, 0)])
def test_a_template_keeps_at_most_1_kib_besides_the_text(extra: int, templated: int) -> None:
    """A template lives as long as its stream: chunks whose bytes besides the text pass
    1 KiB (here a long ``system_fingerprint``) are parsed in full, with the same events;
    a little under that they are still learned."""
    payloads = [orjson.dumps({"id": "c", "system_fingerprint": "f" * extra,
                              "choices": [{"index": 0, "delta": {"content": f"w{i}"}}]})
                for i in range(10)]
    fast = StreamModel("chat", templates=True)
    assert _feed_all(fast, payloads) == _feed_all(StreamModel("chat"), payloads)
    assert fast.templated == templated


_TEXTS = st.text(st.characters(codec="utf-8"), max_size=6)
_SHAPES = st.sampled_from([("reasoning", 0), ("content", 0), ("reasoning", 1),
                           ("reasoning_content", 0), ("content", 1)])


_Chunk = tuple[tuple[str, int], str, "str | None", bytes, bool]
_CHUNKS = st.lists(st.tuples(_SHAPES, _TEXTS, st.sampled_from([None, None, None, "stop"]),
                             st.binary(max_size=2), st.booleans()), max_size=25)


def _chunk_payloads(chunks: list[_Chunk]) -> list[bytes]:
    """The payloads of ``chunks``: each a chunk of one choice's text under one key, with
    a finish or not, and ``junk`` bytes put into the text's place when ``corrupt``."""
    payloads = []
    for (key, index), text_, finish, junk, corrupt in chunks:
        data = orjson.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk",
                             "choices": [{"index": index, "delta": {key: text_},
                                          "logprobs": None, "finish_reason": finish}]})
        if corrupt:
            at = data.index(b'"' + key.encode() + b'":') + len(key) + 4
            data = data[:at] + junk + data[at:]
        payloads.append(data)
    return payloads


@settings(max_examples=300, deadline=None)
@given(_CHUNKS)
def test_templates_never_change_the_events(
        chunks: list[_Chunk]) -> None:
    """Any mix of shapes, texts (escapes, quotes, control characters), finishes and
    corrupted bytes in the text's place gives the same events, or the same error, as a
    full parse of every chunk."""
    payloads = _chunk_payloads(chunks)
    for route in ("chat", "completions"):
        assert _feed_all(StreamModel(route, templates=True), payloads) == _feed_all(  # type: ignore[arg-type]
            StreamModel(route), payloads)  # type: ignore[arg-type]


def _feed_events(model: StreamModel, payloads: list[bytes]) -> list[object]:
    """``_feed_all``, each payload offered first as a whole SSE event to ``match_event``
    (what a first attempt to a streaming client does with a read that is one event)."""
    out: list[object] = []
    for data in payloads:
        hit = model.match_event(b"data: " + data + b"\n\n")
        if hit is not None:
            out += model.fill(*hit)
            continue
        try:
            out += model.feed(data)
        except MalformedChunk as exc:
            out.append(("malformed", str(exc)))
    return out + model.flush()


@settings(max_examples=300, deadline=None)
@given(_CHUNKS)
def test_whole_events_read_both_ways_as_a_full_parse(
        chunks: list[_Chunk]) -> None:
    """Whole events read through ``match_event``, by a template's regular expression
    first (the pure build's way) or by its byte tests alone (the compiled build's), give
    the events, or the error, of a full parse of every chunk."""
    payloads = _chunk_payloads(chunks)
    full = _feed_all(StreamModel("chat"), payloads)
    for plain_first in (True, False):
        model = StreamModel("chat", templates=True, plain_first=plain_first)
        assert _feed_events(model, payloads) == full


@pytest.mark.parametrize("plain_first", [True, False], ids=["plain", "bytes"])
def test_whole_events_of_a_capture_read_through_templates(plain_first: bool) -> None:
    """On a real vLLM thinking loop, nearly every event reads through a template, either
    way, with the events of a full parse."""
    payloads = _payloads("chat_thinking_loop_usage.sse")
    model = StreamModel("chat", templates=True, plain_first=plain_first)
    assert _feed_events(model, payloads) == _feed_all(StreamModel("chat"), payloads)
    assert model.templated >= len(payloads) - 5


@pytest.mark.parametrize("plain_first", [True, False], ids=["plain", "bytes"])
@pytest.mark.parametrize(("first", "second"), [(b'"a"', b'"b"'), (b'"a\\n"', b'"\\"b"')])
def test_a_read_of_two_events_is_no_whole_event(plain_first: bool, first: bytes,
                                                second: bytes) -> None:
    """A read that carries two events of one template starts with the template's prefix
    and ends with its suffix, but is not one event: ``match_event`` says so (without a
    JSON parser, by the raw line break), and the general path reads both."""
    head = b'{"id":"x","choices":[{"index":0,"delta":{"reasoning":'
    tail = b'},"logprobs":null,"finish_reason":null}]}'
    model = StreamModel("chat", templates=True, plain_first=plain_first)
    assert model.match_event(b"data: " + head + b'"learn"' + tail + b"\n\n") is None
    model.feed(head + b'"learn"' + tail)
    assert model.match_event(b"data: " + head + b'"one"' + tail + b"\n\n") is not None
    two = b"data: " + head + first + tail + b"\n\ndata: " + head + second + tail + b"\n\n"
    assert model.match_event(two) is None
    texts = [event.text for data in (head + first + tail, head + second + tail)
             for event in model.feed(data) if isinstance(event, TextDelta)]
    assert texts == [orjson.loads(first), orjson.loads(second)]


def test_the_plain_reading_is_the_regular_expression() -> None:
    """The pure build's way reads a whole event whose text holds no escape through the
    template's regular expression alone, and one with an escape through the byte tests
    (counted by a recording fake of the template's ``rest``)."""
    head = b'{"id":"x","choices":[{"index":0,"delta":{"reasoning":'
    tail = b'},"logprobs":null,"finish_reason":null}]}'
    model = StreamModel("chat", templates=True, plain_first=True)
    model.feed(head + b'"w"' + tail)  # learned
    template = model._head
    assert template is not None
    calls = record_plain_reads(template)
    plain = model.match_event(b"data: " + head + b'"plain text"' + tail + b"\n\n")
    escaped = model.match_event(b"data: " + head + b'"a\\nb"' + tail + b"\n\n")
    assert plain is not None
    assert escaped is not None
    assert (plain[1], escaped[1]) == ("plain text", "a\nb")
    assert calls == [True, False]
