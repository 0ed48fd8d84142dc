"""Real vLLM, Korean thinking loop: detected, cut and answered, UTF-8 intact."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.vllm

MAX_TOKENS = 8000
#: Most tokens a cut attempt may cost upstream (see "How far below" in conftest.py).
CUT_BOUND = MAX_TOKENS // 2


def test_korean_loop_is_cut_and_answered(korean_node) -> None:
    """A Hangul loop in <think> is cut; the thinking-off answer follows in the same stream."""
    before, _ = korean_node.wait_idle()
    result = korean_node.stream(
        messages=korean_node.messages("korean"),
        max_tokens=MAX_TOKENS,
        stream_options={"include_usage": True},
    )
    after, _ = korean_node.wait_idle(timeout=2.0)
    loop = korean_node.script["thinking_loop"]
    reasoning = result.reasoning[0]
    assert result.errors == []
    assert result.done
    assert len(result.identity()) == 1
    assert result.content == {0: korean_node.script["answer"]}
    assert result.finish == {0: "stop"}
    assert reasoning
    assert (loop * (len(reasoning) // len(loop) + 2)).startswith(reasoning)
    assert "\ufffd" not in reasoning
    assert any(re.search(r"\baction=reissue", c) for c in result.comments)
    assert after.generation_tokens - before.generation_tokens < CUT_BOUND


def test_korean_nonstreaming(korean_node) -> None:
    """Non-streaming Korean runaway: the Korean answer, with the runaway headers."""
    completion, headers = korean_node.complete(
        messages=korean_node.messages("korean-ns"), max_tokens=MAX_TOKENS
    )
    assert completion.choices[0].message.content == korean_node.script["answer"]
    assert headers.get("x-runaway-action") == "reissue"
