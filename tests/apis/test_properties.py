"""Chunk invariance for every registered wire API: however the upstream's bytes are split
into reads, the client gets the same bytes, the detectors the same verdict and the books
the same counts (pure; the streams are recorded from the simulated node)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detectors import DetectorConfig
from sidecar.apis import REGISTRY
from sidecar.core.attempt import AttemptSpec, Totals
from sidecar.core.wire import WireApi
from sidecar.dialects import DIALECTS
from tests.apis.recorded import MODELS, recorded, request_body
from tests.reliability.properties import pieces

WAYS = ("stream", "reissue", "body")
CASES = [(api, model, way) for api in REGISTRY for model in MODELS for way in WAYS]


def _run(api: WireApi, model: str, way: str, reads: Sequence[bytes]) -> tuple[Any, ...]:
    """Everything a caller can see after ``reads`` of ``model``'s stream went through one
    attempt of ``api``: the first attempt to a streaming client, a reissue after a cut
    first attempt (``reissue``), or a first attempt to a non-streaming client (``body``)."""
    facts = api.facts(request_body(api, model, stream=way != "body"))
    opened = api.open(facts, DIALECTS["vllm"], request_id="r", model=model)
    fold = opened.fold
    earlier = Totals()
    number = 0
    if way == "reissue":  # a cut first attempt gives the splicer the client's identity
        first = opened.attempt(AttemptSpec(0, DetectorConfig(), 0.0, 0.0))
        first.feed(recorded(api.name, "sim-loop"), 1.0)
        assert first.stopped
        earlier, number = first.totals(), 1
    spec = AttemptSpec(number, DetectorConfig(), 1.0, 0.0, earlier=earlier,
                       step="no-think" if number else "original", index_map={0: 0})
    attempt = opened.attempt(spec)
    out = b""
    for read in reads:
        out += attempt.feed(read, 2.0)
        if attempt.stopped:
            break
    else:
        out += attempt.eof(2.0)
    verdict = attempt.verdict
    return (
        out,
        None if verdict is None else (verdict.detector, verdict.channel, verdict.at_token,
                                      verdict.at_char),
        attempt.counted_tokens, attempt.done, attempt.error, attempt.usage,
        attempt.open_choices, attempt.totals(),
        {i: (c.thinking_tokens, c.content_tokens, c.finished) for i, c in attempt.choices.items()},
        None if fold is None else fold.response(),
    )


def test_every_api_has_recorded_streams() -> None:
    """Each registered API is covered: its streams exist, and a loop stops its attempt
    while a healthy stream does not."""
    assert len(REGISTRY) >= 4
    for api in REGISTRY:
        whole = {model: _run(api, model, "stream", [recorded(api.name, model)])
                 for model in MODELS}
        assert whole["sim-loop"][1] is not None, api.name
        assert whole["sim-healthy"][1] is None, api.name
        assert whole["sim-healthy"][0] == recorded(api.name, "sim-healthy"), api.name


@pytest.mark.parametrize(("api", "model", "way"), CASES,
                         ids=[f"{a.name}-{m}-{w}" for a, m, w in CASES])
@settings(max_examples=12, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=200_000), max_size=40))
def test_any_split_gives_the_same_result(api: WireApi, model: str, way: str,
                                         cuts: list[int]) -> None:
    """The stream split at arbitrary offsets gives what the whole stream in one read
    gives: bytes, verdict, token counts, usage, choices and the non-streaming body."""
    data = recorded(api.name, model)
    assert _run(api, model, way, pieces(data, cuts)) == _run(api, model, way, [data])


@pytest.mark.parametrize(("api", "model"), [(a, m) for a in REGISTRY for m in MODELS],
                         ids=[f"{a.name}-{m}" for a in REGISTRY for m in MODELS])
def test_small_reads_give_the_same_result(api: WireApi, model: str) -> None:
    """Reads of 7 bytes, which split every event and every UTF-8 sequence somewhere, give
    what one read gives."""
    data = recorded(api.name, model)
    small = [data[i : i + 7] for i in range(0, len(data), 7)]
    for way in WAYS:
        assert _run(api, model, way, small) == _run(api, model, way, [data])
