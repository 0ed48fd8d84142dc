"""Properties of the sidecar's pure parsers, one case at a time (shared by the Hypothesis
tests here and ``benchmarks/fuzz.py``).

Each ``check_*`` runs one input through a parser and raises ``AssertionError`` when a
documented contract breaks: an exception other than the documented one escapes, bytes
are lost, or a rewritten request body changes a field it must not touch.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import orjson

from detectors import DetectorConfig
from sidecar.apis.openai.api import no_think_body, salvage_body, watched_body
from sidecar.apis.openai.chunks import ChunkKind, StreamModel
from sidecar.apis.openai.fold import OpenAIFold
from sidecar.apis.openai.splice import Head
from sidecar.codecs.http1 import ProtocolError, ResponseHead, ResponseReader
from sidecar.codecs.sse import SSEDecoder, SSEError
from sidecar.config import DEFAULT_THINKING_OFF_RULES
from sidecar.core.attempt import Totals
from sidecar.core.bodies import prompt_fingerprint, thinking_disabled, useful_reasoning
from sidecar.core.events import MalformedChunk
from sidecar.errors import UpstreamProtocolError
from tests.attempts import chunk_attempt

# Fields a reissue may change (sidecar/apis/openai/api.py's docstring), besides the top-level
# keys of the matching thinking-off rule.
NO_THINK_FIELDS = frozenset({"stream", "stream_options", "n", "model"})
SALVAGE_FIELDS = frozenset({"stream", "stream_options", "messages", "continue_final_message",
                            "add_generation_prompt"})
_DETECTORS = DetectorConfig()


def pieces(data: bytes, cuts: Sequence[int]) -> list[bytes]:
    """``data`` split at the (sorted, clamped) offsets ``cuts``."""
    points = sorted({min(max(c, 0), len(data)) for c in cuts})
    out, prev = [], 0
    for p in [*points, len(data)]:
        out.append(data[prev:p])
        prev = p
    return out


def check_sse(data: bytes, cuts: Sequence[int], max_event_bytes: int = 1 << 20) -> int:
    """Feeding ``data`` in pieces raises nothing but ``SSEError``; without an error the
    events' raw bytes plus the leftover are exactly ``data``, and the decoded events do
    not depend on where the bytes were split. Returns the number of events."""
    split = SSEDecoder(max_event_bytes)
    events = []
    try:
        for piece in pieces(data, cuts):
            events += split.feed(piece)
    except SSEError:
        return -1
    tail, rest = split.close()
    events += tail
    assert b"".join(e.raw for e in events) + rest == data
    whole = SSEDecoder(1 << 30)
    ref = whole.feed(data)
    ref_tail, ref_rest = whole.close()
    assert [(e.raw, e.data) for e in events] == [(e.raw, e.data) for e in ref + ref_tail]
    assert rest == ref_rest
    return len(events)


def feed_response(reader: ResponseReader,
                  parts: Sequence[bytes]) -> tuple[ResponseHead | None, bytes]:
    """Feed ``parts`` to ``reader`` as socket reads: its head (None while incomplete) and
    the body bytes they carried."""
    head = None
    body = []
    for part in parts:
        if head is None:
            head = reader.head(part)
            if head is not None:
                body.append(reader.body(b""))
        else:
            body.append(reader.body(part))
    return head, b"".join(body)


def _read_response(parts: Sequence[bytes]) -> tuple[int, bytes, bool] | None:
    """Status (0 without a head), body and whether the message ended, of ``parts`` fed to a
    reader as socket reads and then the close; None when the reader raised
    ``ProtocolError``."""
    reader = ResponseReader()
    try:
        head, body = feed_response(reader, parts)
        if head is not None:
            reader.eof()
    except ProtocolError:
        return None
    return (0 if head is None else head.status), body, reader.done


def check_http1(data: bytes, cuts: Sequence[int]) -> int:
    """The HTTP/1.1 reader fed ``data`` in pieces, then the close, raises nothing but
    ``ProtocolError``, and gives the same status, body and end as when fed ``data`` whole
    (or the error in both cases). Returns the body's length, -1 on an error."""
    split = _read_response(pieces(data, cuts))
    assert split == _read_response([data])
    return -1 if split is None else len(split[1])


def _stream_outcome(model: StreamModel, data: bytes) -> list[Any] | str:
    """The events ``model`` makes of ``data``, or the ``MalformedChunk`` message."""
    try:
        return list(model.feed(data))
    except MalformedChunk as exc:
        return str(exc)


def check_stream_model(route: ChunkKind, payloads: Sequence[bytes], thinking: bool = False) -> int:
    """``StreamModel.feed`` raises only ``MalformedChunk`` and ``flush`` nothing, and a
    model with templates gives the same events and errors as one without; returns the
    number of events."""
    model = StreamModel(route, starts_in_thinking=thinking)
    fast = StreamModel(route, starts_in_thinking=thinking, templates=True)
    count = 0
    for data in payloads:
        outcome = _stream_outcome(model, data)
        assert _stream_outcome(fast, data) == outcome
        if isinstance(outcome, list):
            count += len(outcome)
    flushed = model.flush()
    assert fast.flush() == flushed
    count += len(flushed)
    for index in (0, 1, -1):
        assert fast.inline_open(index) == model.inline_open(index)
    return count


def check_aggregator(route: ChunkKind, chunks: Sequence[Any]) -> bytes:
    """Every chunk the stream model accepts folds into the aggregator, and ``body()`` is
    a JSON object."""
    model = StreamModel(route)
    agg = OpenAIFold(route)
    for chunk in chunks:
        try:
            model.feed(orjson.dumps(chunk))
        except (MalformedChunk, TypeError):
            continue
        # The attempt stops folding at an in-stream error event (sidecar/apis/openai/attempt.py).
        if model.chunk is not None and model.chunk.get("error") is None:
            agg.add(model.chunk, index_map={0: 1, 1: 0})
            usage = model.chunk.get("usage")
            if isinstance(usage, dict):
                agg.set_usage(usage)
    agg.set_choice_text(0, finish_reason="length")
    body = agg.body()
    assert isinstance(orjson.loads(body), dict)
    return body


def check_attempt(route: ChunkKind, chunks: Sequence[bytes], *, number: int = 0,
                  aggregate: bool = False) -> bytes:
    """One watched attempt over arbitrary upstream bytes raises only
    ``UpstreamProtocolError``; what it returns for the client is bytes."""
    head = Head("chatcmpl-x", 1, "m", route) if number else None
    attempt = chunk_attempt(route, number=number, detectors=_DETECTORS, head=head,
                            index_map={0: 1} if number else None, aggregate=aggregate,
                            earlier=Totals(3, 4, 2, 1))
    out = b""
    now = 0.0
    try:
        for chunk in chunks:
            now += 0.01
            out += attempt.feed(chunk, now)
            if attempt.stopped:
                break
        out += attempt.eof(now)
        attempt.tick(now + 1)
    except UpstreamProtocolError:
        pass
    attempt.totals()
    if attempt.aggregator is not None:
        assert isinstance(orjson.loads(attempt.aggregator.body()), dict)
    assert isinstance(out, bytes)
    return out


def _changed(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    keys = set(before) | set(after)
    return {k for k in keys if k not in before or k not in after or before[k] != after[k]}


def check_reissue(body: dict[str, Any], *, client_stream: bool, open_choices: int,
                  fallback: str | None, reasoning: str) -> None:
    """Reissue bodies change only the documented fields and never the input; the
    fingerprint and the thinking switch read any body. Bodies nested deeper than orjson
    serializes (the proxy passes those through unwatched) are out of scope."""
    try:
        orjson.dumps(body)
    except TypeError:
        return  # too deep to re-serialize: passed through, see test_fuzz_proxy
    before = copy.deepcopy(body)
    thinking_disabled(body)
    prompt_fingerprint(body)

    watched = watched_body(body, client_stream=client_stream)
    allowed = set() if client_stream else {"stream", "stream_options"}
    assert _changed(body, watched) <= allowed

    rules = DEFAULT_THINKING_OFF_RULES
    out = no_think_body(body, rules, client_stream=client_stream, open_choices=open_choices,
                        model=fallback)
    target = out.get("model")
    patch_keys: set[str] = set()
    for rule in rules:  # the rule that applied is one of these; allow its keys
        patch_keys |= set(rule.set)
    assert _changed(body, out) <= NO_THINK_FIELDS | patch_keys
    assert thinking_disabled(out) or not isinstance(target, str)
    if fallback is not None:
        assert out["model"] == fallback
    for key in patch_keys & set(body):  # deep merge keeps what the client set alongside
        if isinstance(body[key], dict) and isinstance(out[key], dict):
            for sub in body[key]:
                if sub not in ("enable_thinking", "thinking"):
                    assert out[key][sub] == body[key][sub]

    salvaged = salvage_body(body, reasoning, client_stream=client_stream)
    if salvaged is not None:
        assert _changed(body, salvaged) <= SALVAGE_FIELDS
        assert salvaged["messages"][:-1] == body["messages"]
        assert salvaged["messages"][-1]["role"] == "assistant"
    useful_reasoning(reasoning, reasoning[len(reasoning) // 2:])
    assert body == before
    orjson.dumps(out)
