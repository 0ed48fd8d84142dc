"""vLLM's chat chunks, byte for byte, without a server."""

from __future__ import annotations

from sidecar.simulator.chat.vllm import VllmChat
from sidecar.simulator.common.openai_wire import OpenAIServer, StreamIdentity, Usage

IDENT = StreamIdentity("chatcmpl-x", 1, "m")


def test_wire_chat_chunks_exact_bytes() -> None:
    """The encoder writes vLLM's key order and explicit nulls."""
    wire = VllmChat()
    chunk = wire.delta_chunk(
        IDENT,
        0,
        {"reasoning": " Hmm"},
        finish_reason=None,
        stop_reason=None,
        usage=None,
        fingerprint=None,
    )
    assert chunk == (
        b'data: {"id":"chatcmpl-x","object":"chat.completion.chunk","created":1,"model":"m",'
        b'"choices":[{"index":0,"delta":{"reasoning":" Hmm"},"logprobs":null,'
        b'"finish_reason":null,"token_ids":null}]}\n\n'
    )
    usage = wire.usage_chunk(IDENT, Usage(9, 3, 2), "fp")
    assert usage.endswith(
        b'"choices":[],"usage":{"prompt_tokens":9,"total_tokens":12,"completion_tokens":3,'
        b'"completion_tokens_details":{"reasoning_tokens":2}},"system_fingerprint":"fp"}\n\n'
    )
    assert OpenAIServer().done() == b"data: [DONE]\n\n"


def test_wire_keeps_non_ascii_raw() -> None:
    """Hangul goes out as UTF-8, not as \\u escapes, like pydantic's JSON."""
    chunk = VllmChat().delta_chunk(
        IDENT,
        0,
        {"content": "잠"},
        finish_reason=None,
        stop_reason=None,
        usage=None,
        fingerprint=None,
    )
    assert "잠".encode() in chunk
