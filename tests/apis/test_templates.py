"""Learned event templates (``sidecar.apis.templates``) on the SSE-event attempts
(``sidecar.apis.sse_events``: Messages and Responses): an event read through a template
changes what a full parse of it changes, however the stream looks and is split into
reads; only the parse is cheaper."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detectors import DetectorConfig
from sidecar.apis import REGISTRY
from sidecar.apis.messages.attempt import MessagesAttempt
from sidecar.apis.messages.splice import MessagesSplicer
from sidecar.apis.responses.attempt import ResponsesAttempt
from sidecar.apis.responses.splice import ResponsesSplicer
from sidecar.apis.sse_events import EventAttempt
from sidecar.apis.templates import PLAIN_FIRST, EventTemplates
from sidecar.core.attempt import Attempt, AttemptSpec
from sidecar.dialects import DIALECTS
from sidecar.errors import UpstreamProtocolError
from tests.apis.plain_reads import record_plain_reads
from tests.apis.recorded import recorded, request_body

CAPTURES = Path(__file__).parent.parent / "data" / "captures"
AGENT_APIS = ("anthropic.messages", "openai.responses")


def _attempt(api_name: str, *, stream: bool = True, templates: bool = True) -> Attempt:
    """A first attempt of ``api_name``, as the API makes it, or one that parses every
    event in full (``templates=False``)."""
    api = next(a for a in REGISTRY if a.name == api_name)
    facts = api.facts(request_body(api, "sim-loop", stream=stream))
    opened = api.open(facts, DIALECTS["vllm"], request_id="r", model="m")
    splicer = opened.splicer
    spec = AttemptSpec(0, DetectorConfig(), 0.0, 0.0)
    if templates:
        return opened.attempt(spec)
    if isinstance(splicer, MessagesSplicer):
        return MessagesAttempt(spec, splicer, None, templates=False)
    assert isinstance(splicer, ResponsesSplicer)
    return ResponsesAttempt(spec, splicer, None, templates=False)


def _events(body: bytes) -> list[bytes]:
    """``body`` cut after each event (LF framing), the trailing piece last."""
    return re.findall(rb".*?\n\n|.+$", body, re.S)


def _observe(api_name: str, reads: list[bytes], *, templates: bool = True,
             plain_first: bool = PLAIN_FIRST) -> tuple[tuple[Any, ...], int]:
    """What a caller can see after ``reads`` went through a first attempt to a streaming
    client: bytes (unless it failed), the error, the verdict, counts and what the
    splicer was told; and how many events a template read. ``plain_first``: how its
    templates read (``EventTemplates``; the build's way unless told)."""
    attempt = _attempt(api_name, templates=templates)
    if plain_first != PLAIN_FIRST:  # the other build's way: the attempt's own, replaced
        assert isinstance(attempt, EventAttempt)
        attempt._templates = EventTemplates(plain_first=plain_first)
    out, err = b"", None
    try:
        for read in reads:
            out += attempt.feed(read, 1.0)
            if attempt.stopped:
                break
        else:
            out += attempt.eof(1.0)
    except UpstreamProtocolError as exc:
        err, out = str(exc), b""
    finally:
        attempt.settle()  # as the read loop leaves it (``sidecar.net.pump``)
    verdict = attempt.verdict
    splicer = getattr(attempt, "splicer", None)
    told = ((getattr(attempt, "upstream_sequence", None), splicer.kept.text())
            if isinstance(splicer, ResponsesSplicer) else None)
    seen = (out, err,
            None if verdict is None else (verdict.detector, verdict.at_token, verdict.at_char),
            attempt.counted_tokens, attempt.done, attempt.error, attempt.usage,
            attempt.open_choices, attempt.totals(), attempt.inline_open(0), told,
            {i: (c.thinking_tokens, c.content_tokens, c.finished, c.reasoning_seen,
                 c.reasoning_head) for i, c in attempt.choices.items()})
    templates = getattr(attempt, "_templates", None)
    assert isinstance(templates, EventTemplates)
    return seen, templates.hits


def _captures() -> list[tuple[str, str, Path]]:
    out = []
    for folder in ("vllm-0.32.0-agent-apis", "llama.cpp-agent-apis"):
        for path in sorted((CAPTURES / folder).glob("*.sse")):
            api = "anthropic.messages" if path.name.startswith("messages") else "openai.responses"
            out.append((f"{folder}/{path.name}", api, path))
    return out


@pytest.mark.parametrize(("name", "api", "path"), _captures(), ids=[c[0] for c in _captures()])
def test_templates_give_what_a_full_parse_gives_on_real_captures(name: str, api: str,
                                                                 path: Path) -> None:
    """Each real vLLM and llama.cpp capture, fed one event per read or whole in one read,
    gives what it gives with every event parsed in full, and templates read most of its
    deltas either way."""
    body = path.read_bytes()
    full, no_hits = _observe(api, _events(body), templates=False)
    assert no_hits == 0
    deltas = len(re.findall(rb"\ndata: [^\n]*_delta", body))
    for reads in (_events(body), [body]):
        seen, hits = _observe(api, reads)
        assert seen == full
        assert hits >= deltas // 2 - 2, (hits, deltas)


@pytest.mark.parametrize("api", AGENT_APIS)
@pytest.mark.parametrize("model", ["sim-loop", "sim-healthy", "sim-leaky"])
def test_templates_read_most_deltas_of_the_simulated_streams(api: str, model: str) -> None:
    """On the simulated node's streams (a loop cut by a detector, a healthy answer, an
    inline ``<think>``), one event per read gives what a full parse gives, and nearly
    every delta after the first of its shape goes through a template."""
    body = recorded(api, model)
    by_event, hits = _observe(api, _events(body))
    assert by_event == _observe(api, [body], templates=False)[0]
    tokens = by_event[3]  # one per delta the attempt read
    assert tokens > 100
    assert hits >= tokens - 3  # the first delta of each shape is parsed in full


@pytest.mark.parametrize("api", AGENT_APIS)
def test_no_templates_for_a_reissue_or_a_non_streaming_client(api: str) -> None:
    """Only the first attempt to a streaming client forwards events as they came and
    learns templates: a non-streaming client's attempt parses every event in full."""
    attempt = _attempt(api, stream=False)
    for read in _events(recorded(api, "sim-healthy")):
        attempt.feed(read, 1.0)
    templates = getattr(attempt, "_templates", None)
    assert isinstance(templates, EventTemplates)
    assert templates.hits == 0


# -- the templates alone ---------------------------------------------------------------

RESPONSES_DELTA = (b'{"content_index":0,"delta":%s,"item_id":"rs_1","output_index":0,'
                   b'"sequence_number":%s,"type":"response.reasoning_text.delta"}')


def _responses_event(text: bytes, number: bytes) -> bytes:
    return (b"event: response.reasoning_text.delta\ndata: " + RESPONSES_DELTA % (text, number)
            + b"\n\n")


#: Both ways a template reads an event: its regular expression first (the pure build's
#: way), or its byte tests alone (the compiled build's).
BOTH_WAYS = pytest.mark.parametrize("plain_first", [True, False], ids=["plain", "bytes"])


def _learned(raw: bytes, number_key: str | None = "sequence_number", *,
             plain_first: bool = PLAIN_FIRST) -> EventTemplates:
    templates = EventTemplates(plain_first=plain_first)
    data = raw.split(b"data: ", 1)[1][:-2]
    templates.learn(raw, data, orjson.loads(data), ("delta",), "tag", number_key)
    return templates


@BOTH_WAYS
def test_a_number_hole_reads_plain_integers_only(plain_first: bool) -> None:
    """The number after the text is read when it is a plain JSON integer; a leading
    zero, a sign, a fraction, an exponent or more than 15 digits is left to a full parse
    (which reports what is wrong or reads what it is)."""
    templates = _learned(_responses_event(b'"w"', b"5"), plain_first=plain_first)
    assert templates.match(_responses_event(b'"\\"x\\u00e9"', b"123456")) == '"x\u00e9'
    assert templates.number == 123456
    assert templates.match(_responses_event(b'"x"', b"0")) is not None
    assert templates.match(_responses_event(b'"x"', b"123456789012345")) == "x"
    assert templates.number == 123456789012345  # the most digits read
    for number in (b"07", b"-1", b"1.5", b"1e3", b"1234567890123456", b"", b"x"):
        assert templates.match(_responses_event(b'"x"', number)) is None, number
    for text in (b'""', b'"a","b"', b'"\xff"', b"7", b"null", b'"a'):
        assert templates.match(_responses_event(text, b"9")) is None, text
    assert templates.hits == 3


def _parsed_text(text: bytes) -> str | None:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, str) and value else None


@pytest.mark.parametrize("body", [
    b"plain", " \u00e9 \u4e2d \U0001f642".encode(), b"a\tb", b"\t", b"a\x7f", b"\x01",
    "\u2028".encode(), "\u00a0x".encode(), "\ufeff".encode(), "\uffff".encode(),
    b"\xed\xa0\x80", b"\xff", b"a\xc3", b'a"b', b"a\\nb", b'\\"', b"\\", b"a\\u00e9"])
@BOTH_WAYS
def test_a_text_reads_as_a_json_parser_reads_it(body: bytes, plain_first: bool) -> None:
    """A text without escapes is decoded from its bytes, not parsed; anything a JSON
    parser might read otherwise (a control or other non-printable character, bytes that
    are not UTF-8, a quote, an escape) goes to the parser: a template reads exactly what
    parsing the string reads, with or without a number hole."""
    expected = _parsed_text(b'"' + body + b'"')
    numbered = _learned(_responses_event(b'"w"', b"5"), plain_first=plain_first)
    assert numbered.match(_responses_event(b'"' + body + b'"', b"7")) == expected
    plain = _learned(_responses_event(b'"w"', b"5"), None, plain_first=plain_first)
    assert plain.match(_responses_event(b'"' + body + b'"', b"5")) == expected


def test_a_template_without_a_number_hole_where_the_event_has_none() -> None:
    """A shape without the number (llama.cpp numbers no Responses events) gets a
    template with the text as its only hole; an event whose number is elsewhere than
    after the text gets none."""
    raw = (b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
           b'"item_id":"msg_1","delta":"a"}\n\n')
    templates = _learned(raw)
    assert templates.match(raw.replace(b'"a"', b'"bc"')) == "bc"
    assert templates.number is None
    before = (b'event: x\ndata: {"sequence_number":3,"delta":"a","type":"x"}\n\n')
    assert _learned(before).match(before) is None


def test_learning_stops_when_templates_never_match() -> None:
    """A stream whose every delta differs besides the text and number (a new item id each
    time) stops learning after four unused templates; one whose deltas cannot become a
    template (a second data line) stops after sixteen."""
    templates = EventTemplates()
    for i in range(20):
        raw = _responses_event(b'"w"', b"1").replace(b"rs_1", f"rs_{i}".encode())
        templates.learn(raw, raw.split(b"data: ", 1)[1][:-2],
                        orjson.loads(raw.split(b"data: ", 1)[1][:-2]), ("delta",), "t",
                        "sequence_number")
        assert templates.match(raw.replace(b'"w"', b'"v"').replace(b"rs_", b"rx_")) is None
    assert not templates.learning
    templates = EventTemplates()
    raw = b'data: {"delta":\ndata: "w"}\n\n'
    for _ in range(16):
        templates.learn(raw, b'{"delta":\n"w"}', {"delta": "w"}, ("delta",), "t")
    assert not templates.learning
    assert templates.hits == 0


@BOTH_WAYS
def test_an_event_of_an_older_shape_still_reads_through_its_template(
        plain_first: bool) -> None:
    """The last learned template is tried first; an event of another learned shape (the
    reasoning again after the answer's template was learned) still reads through its
    own, with its own tag."""
    reasoning = _responses_event(b'"w"', b"1")
    answer = (reasoning.replace(b"reasoning_text", b"output_text")
              .replace(b"rs_1", b"msg_1"))
    templates = EventTemplates(plain_first=plain_first)
    for raw, tag in ((reasoning, "thinking"), (answer, "content")):
        data = raw.split(b"data: ", 1)[1][:-2]
        templates.learn(raw, data, orjson.loads(data), ("delta",), tag, "sequence_number")
    assert templates.match(answer.replace(b'"w"', b'"a"')) == "a"
    assert (templates.tag, templates.number) == ("content", 1)
    assert templates.match(reasoning.replace(b'"w"', b'"r"').replace(b":1,", b":7,")) == "r"
    assert (templates.tag, templates.number) == ("thinking", 7)
    assert templates.hits == 2


@BOTH_WAYS
def test_an_item_of_the_same_shape_reads_through_its_own_template(plain_first: bool) -> None:
    """A second reasoning item has the first one's prefix, suffix and mid length, but
    another item id in its mid: its events read through its own template (learned
    last). An event whose mid is not the head's, whatever its item, goes to a full parse
    (the items of a stream come one after the other)."""
    first = _responses_event(b'"w"', b"1")
    second = first.replace(b"rs_1", b"rs_2")
    templates = EventTemplates(plain_first=plain_first)
    for raw in (first, second):
        data = raw.split(b"data: ", 1)[1][:-2]
        templates.learn(raw, data, orjson.loads(data), ("delta",), "t", "sequence_number")
    assert templates.match(second.replace(b'"w"', b'"b"').replace(b":1,", b":8,")) == "b"
    assert templates.number == 8
    assert templates.match(first.replace(b'"w"', b'"a"')) is None
    assert templates.match(first.replace(b"rs_1", b"rs_3")) is None
    assert templates.hits == 1


def test_the_plain_reading_is_the_regular_expression() -> None:
    """The pure build's way reads an event whose text holds no escape through the
    template's regular expression alone, and one with an escape through the byte tests
    (counted by a recording fake of the template's ``rest``)."""
    templates = _learned(_responses_event(b'"w"', b"5"), plain_first=True)
    head = templates._head
    assert head is not None
    calls = record_plain_reads(head)
    assert templates.match(_responses_event(b'"plain text"', b"6")) == "plain text"
    assert templates.match(_responses_event(b'"a\\nb"', b"7")) == "a\nb"
    assert calls == [True, False]
    assert templates.hits == 2


def test_streams_share_the_bytes_of_equal_template_parts() -> None:
    """Two streams that learn the same shape hold one object for each part that is the
    same on both (what every event reads stays in the CPU caches); the part with the
    item id is each stream's own."""
    one = _learned(_responses_event(b'"w"', b"1"))
    two = _learned(_responses_event(b'"v"', b"9").replace(b"rs_1", b"rs_2"))
    first, second = one._head, two._head
    assert first is not None
    assert second is not None
    assert first.prefix is second.prefix
    assert first.suffix is second.suffix
    assert first.mid != second.mid


@pytest.mark.parametrize(("extra", "learned"), [(800, True), (1100, False)])
def test_a_template_keeps_at_most_1_kib_besides_the_text(extra: int, learned: bool) -> None:
    """A template lives as long as its stream: an event whose bytes besides the text pass
    1 KiB is not kept."""
    raw = _responses_event(b'"w"', b"1").replace(b"rs_1", b"rs_" + b"f" * extra)
    assert (_learned(raw).match(raw) is not None) is learned


# -- any stream: a template never changes what the attempt does -----------------------

_TEXTS = st.one_of(st.text(st.characters(codec="utf-8"), max_size=6),
                   st.sampled_from(["<think>", "</think>", "<thi", "nk>x", "q"]))
#: Mostly nothing: a stray byte usually ends the stream with an error.
_JUNK = st.sampled_from([b""] * 40 + [b'"', b"\\", b"\xff", b"\x01", b"\n", b"0", b"-",
                                      b'","', b" "])


def _messages_stream(items: list[tuple[int, str, bytes, bool]]) -> list[bytes]:
    events = [b'event: message_start\ndata: {"type":"message_start","message":{"id":"m",'
              b'"usage":{"input_tokens":5,"output_tokens":0}}}\n\n']
    for kind, text, junk, in_text in items:
        dtype, key = (("thinking_delta", "thinking"), ("text_delta", "text"),
                      ("thinking_delta", "thinking"), ("signature_delta", "signature"))[kind]
        data = orjson.dumps({"type": "content_block_delta",
                             "delta": {"type": dtype, key: text}, "index": kind % 2})
        if junk:
            at = data.index(b'"' + key.encode() + b'":') + len(key) + (4 if in_text else 3)
            data = data[:at] + junk + data[at:]
        events.append(b"event: content_block_delta\ndata: " + data + b"\n\n")
    events.append(b'event: message_delta\ndata: {"type":"message_delta","delta":'
                  b'{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}\n\n')
    events.append(b'event: message_stop\ndata: {"type":"message_stop"}\n\n')
    return events


def _responses_stream(items: list[tuple[int, str, bytes, bool]]) -> list[bytes]:
    kinds = ("response.reasoning_text.delta", "response.output_text.delta",
             "response.reasoning_summary_text.delta", "response.function_call_arguments.delta")
    events = []
    for number, (kind, text, junk, in_text) in enumerate(items):
        data = orjson.dumps({"content_index": 0, "delta": text, "item_id": f"i{kind % 2}",
                             "output_index": kind % 2, "sequence_number": number,
                             "type": kinds[kind]})
        if junk:
            key = b'"delta":' if in_text else b'"sequence_number":'
            at = data.index(key) + len(key) + (1 if in_text else 0)
            data = data[:at] + junk + data[at:]
        events.append(b"event: " + kinds[kind].encode() + b"\ndata: " + data + b"\n\n")
    events.append(b'event: response.completed\ndata: {"type":"response.completed","response":'
                  b'{"status":"completed","usage":{"input_tokens":5,"output_tokens":9}},'
                  b'"sequence_number":99}\n\n')
    return events


@pytest.mark.parametrize("api", AGENT_APIS)
@pytest.mark.parametrize("first", [0, 1])
def test_every_kind_of_delta_through_a_template(api: str, first: int) -> None:
    """Reasoning deltas, answer deltas after reasoning, and answer deltas with no
    reasoning before them (through the inline ``<think>`` splitter, tags split across
    deltas) each go through a template and give what a full parse gives."""
    texts = ["<thi", "nk>a", " b", "</th", "ink> c", " d", " e"]
    kinds = [first] * 4 + [1 - first] * 3 + [1] * len(texts) + [2] * 3
    items = [(kind, texts[i % len(texts)], b"", False) for i, kind in enumerate(kinds)]
    events = (_messages_stream if api == "anthropic.messages" else _responses_stream)(items)
    full = _observe(api, events, templates=False)[0]
    seen, hits = _observe(api, events)
    assert seen == full
    assert hits >= len(items) - 6  # the first delta of each shape is learned
    assert full[3] > 0  # tokens were counted


@settings(max_examples=300, deadline=None)
@given(api=st.sampled_from(AGENT_APIS),
       items=st.lists(st.tuples(st.sampled_from([0, 0, 0, 1, 1, 2, 3]), _TEXTS, _JUNK,
                                st.booleans()), max_size=25))
def test_templates_never_change_what_the_attempt_does(
        api: str, items: list[tuple[int, str, bytes, bool]]) -> None:
    """Any mix of delta shapes and texts (escapes, quotes, control characters, ``<think>``
    tags), with stray bytes in the text's or the number's place, fed one event per read
    or all in one read, gives the bytes, state and error of a full parse of every event."""
    events = (_messages_stream if api == "anthropic.messages" else _responses_stream)(items)
    full = _observe(api, events, templates=False)[0]
    for plain_first in (True, False):  # the pure build's way and the compiled build's
        assert _observe(api, events, plain_first=plain_first)[0] == full
        assert _observe(api, [b"".join(events)], plain_first=plain_first)[0] == full
