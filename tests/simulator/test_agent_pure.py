"""The agent-API pieces of the simulator that are pure: the two event state machines, the
replay extras, and that none of the pure modules imports the network stack."""

from __future__ import annotations

import ast
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.simulator.engine.behaviours import Behaviours, load_traces
from sidecar.simulator.engine.generation import Channel
from sidecar.simulator.engine.job import Timings
from sidecar.simulator.messages.servers import SglangMessages
from sidecar.simulator.messages.stream import MessagesStream
from sidecar.simulator.messages.vllm import VllmMessages
from sidecar.simulator.responses.stream import ResponseHead, ResponsesStream, ResponseUsage
from sidecar.simulator.responses.vllm import VllmResponses

PURE = ("common/validation", "common/thinking", "common/errors", "common/sse", "common/draw",
        "common/gojson", "messages/request", "messages/stream", "messages/vllm",
        "messages/servers", "responses/request", "responses/stream", "responses/vllm",
        "responses/servers")
SIMULATOR = Path(__file__).parent.parent.parent / "sidecar" / "simulator"


class CountingDraw:
    """A fake source of randomness: every draw is a counter, so ids are predictable."""

    def __init__(self) -> None:
        self.n = 0

    def hex(self, digits: int) -> str:
        self.n += 1
        return f"{self.n:0{digits}x}"

    def alnum(self, length: int) -> str:
        self.n += 1
        return f"{self.n:0{length}d}"

    def number(self, below: int) -> int:
        self.n += 1
        return self.n % below


def _sse(data: bytes) -> list[tuple[str, dict[str, object]]]:
    out = []
    for block in data.split(b"\n\n")[:-1]:
        name, payload = block.split(b"\n")
        out.append((name.removeprefix(b"event: ").decode(),
                    orjson.loads(payload.removeprefix(b"data: "))))
    return out


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_do_no_io(module: str) -> None:
    """Validation and encoders import neither aiohttp nor asyncio nor the clock."""
    tree = ast.parse((SIMULATOR / f"{module}.py").read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom)}
    assert not imported & {"aiohttp", "asyncio", "time", "socket", "random"}


def test_messages_stream_blocks_and_indices() -> None:
    """Thinking then text: the thinking block gets a signature and closes at index 0, the
    text block opens at 1; invisible and empty tokens make no event; the end carries usage."""
    draw = CountingDraw()
    stream = MessagesStream(VllmMessages(), "chatcmpl-x", "m", draw)
    data = stream.start(7)
    for channel, text in [(Channel.SPECIAL, ""), (Channel.REASONING, "a"),
                          (Channel.REASONING, ""), (Channel.REASONING, "b"),
                          (Channel.SPECIAL, ""), (Channel.CONTENT, "c")]:
        data += stream.token(channel, text)
    data += stream.finish("stop", 7, 6)
    events = _sse(data)
    assert [n for n, _ in events] == [
        "message_start", "content_block_start", "content_block_delta", "content_block_delta",
        "content_block_delta", "content_block_stop", "content_block_start",
        "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    assert events[4][1] == {"type": "content_block_delta", "delta": {
        "type": "signature_delta", "signature": f"{1:032x}"}, "index": 0}
    assert events[6][1]["index"] == 1
    assert events[-2][1]["usage"] == {"input_tokens": 7, "output_tokens": 6}
    assert events[-2][1]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}


def test_messages_stream_leading_text_and_dropped_reasoning() -> None:
    """A leading text goes before the first text delta only; SGLang's stream drops
    reasoning entirely."""
    stream = MessagesStream(SglangMessages(), "msg_x", "m", CountingDraw(),
                            leading_text="\n\n")
    data = stream.token(Channel.REASONING, "hidden")
    data += stream.token(Channel.CONTENT, "Fix") + stream.token(Channel.CONTENT, "!")
    texts = [e["delta"]["text"] for n, e in _sse(data) if n == "content_block_delta"]
    assert b"hidden" not in data
    assert texts == ["\n\nFix", "!"]


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
    events = _sse(data)
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


def test_replay_answer_and_served_behaviour(tmp_path: Path) -> None:
    """A replay record's answer is the thinking-off reply; the served name can run
    sim-replay; an unknown behaviour is refused."""
    traces = load_traces(['{"text": "<think> a b", "answer": "Fix!"}', '{"text": "x"}'])
    assert traces[0].answer == "Fix!"
    assert traces[1].answer is None
    path = tmp_path / "t.jsonl"
    path.write_text('{"text": "<think> a b", "answer": "Fix!"}\n', encoding="utf-8")
    behaviours = Behaviours(seed=0, served_model_name="tiny", replay_file=path,
                            served_model_behaviour="sim-replay")
    assert behaviours.resolve("tiny") == "sim-replay"
    assert behaviours.resolve("sim-loop") == "sim-loop"
    assert list(behaviours.script("tiny", key="k", choice=0).direct()) == ["Fix", "!"]
    with pytest.raises(ValueError, match="sim-replay"):
        Behaviours(seed=0, served_model_name="tiny", replay_file=None,
                   served_model_behaviour="sim-replay")
