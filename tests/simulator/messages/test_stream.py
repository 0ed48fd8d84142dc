"""The Messages event state machine, without a server."""

from __future__ import annotations

from sidecar.simulator.engine.generation import Channel
from sidecar.simulator.messages.servers import SglangMessages
from sidecar.simulator.messages.stream import MessagesStream
from sidecar.simulator.messages.vllm import VllmMessages
from tests.simulator.conftest import CountingDraw, named_events


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
    events = named_events(data)
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
    texts = [e["delta"]["text"] for n, e in named_events(data) if n == "content_block_delta"]
    assert b"hidden" not in data
    assert texts == ["\n\nFix", "!"]
