"""The Responses item state machine, without a server."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sidecar.simulator.engine.generation import Channel
from sidecar.simulator.engine.job import Timings
from sidecar.simulator.responses.stream import ResponseHead, ResponsesStream, ResponseUsage
from sidecar.simulator.responses.vllm import VllmResponses
from tests.simulator.conftest import CountingDraw, named_events


@given(st.lists(st.tuples(st.sampled_from([Channel.REASONING, Channel.CONTENT,
                                           Channel.SPECIAL]),
                          st.text(max_size=3)), max_size=30),
       st.booleans())
def test_responses_stream_invariants(tokens: list[tuple[Channel, str]],
                                     include_reasoning: bool) -> None:
    """For any token sequence: sequence numbers run 0, 1, 2, …; every opened item is done
    once, in output_index order; the final output lists exactly the done items; hidden
    reasoning never shows."""
    head = ResponseHead("resp_x", 0, "m", {})
    stream = ResponsesStream(VllmResponses(), head, CountingDraw(),
                             include_reasoning=include_reasoning)
    data = stream.start()
    for channel, text in tokens:
        data += stream.token(channel, text)
    data += stream.finish("length", ResponseUsage(1, 2, 1), Timings(0.0, 0.0), 0)
    events = named_events(data)
    assert [e["sequence_number"] for _, e in events] == list(range(len(events)))
    added = [e["output_index"] for n, e in events if n == "response.output_item.added"]
    done = [e for n, e in events if n == "response.output_item.done"]
    assert added == [e["output_index"] for e in done] == list(range(len(added)))
    final = events[-1][1]["response"]
    assert isinstance(final, dict)
    assert final["output"] == [e["item"] for e in done]
    if not include_reasoning:
        assert "response.reasoning_text.delta" not in [n for n, _ in events]
    shown = "".join(text for channel, text in tokens if channel is Channel.CONTENT)
    assert "".join(str(e["delta"]) for n, e in events
                   if n == "response.output_text.delta") == shown
