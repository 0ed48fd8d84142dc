"""Real vLLM, leaky model (loops in content with thinking off): the ladder ends cleanly.

Sidecar config from scripts/e2e-vllm.sh (``[e2e]``): ``reissue.ladder = ["no-think",
"salvage"]``, ``reissue.max_attempts = 3``. Thinking loops, thinking off loops in content,
salvage loops in content too, so the response must end with finish_reason ``length``.
"""

from __future__ import annotations

import re
import time

import pytest
from openai.types.chat import ChatCompletionChunk

pytestmark = pytest.mark.vllm

MAX_TOKENS = 8000
USAGE = {"stream_options": {"include_usage": True}}


def _actions(comments: list[str]) -> list[str]:
    found = [re.search(r"\baction=(\S+)", c) for c in comments if c.startswith("runaway")]
    return [m.group(1) for m in found if m]


def test_ladder_is_walked_and_ends_with_length(leaky_node, e2e_report) -> None:
    """Every step runs away; the client gets one clean stream ending in length, vLLM idles."""
    before, _ = leaky_node.wait_idle()
    result = leaky_node.stream(
        messages=leaky_node.messages("ladder"), max_tokens=MAX_TOKENS, **USAGE
    )
    after, _ = leaky_node.wait_idle(timeout=2.0)
    time.sleep(0.5)
    generated = after.generation_tokens - before.generation_tokens
    e2e_report(
        "leaky_ladder",
        vllm_before=before.as_dict(),
        vllm_after=after.as_dict(),
        generation_tokens_delta=generated,
        comments=result.comments,
        client_usage=result.usage.model_dump() if result.usage else None,
    )

    assert result.errors == []
    assert result.done
    assert result.events_after_done == 0
    assert len(result.identity()) == 1
    assert result.finish == {0: "length"}
    assert _actions(result.comments) == ["reissue:no-think", "reissue:salvage", "finish"]
    assert leaky_node.script["answer"] in result.content[0]
    assert leaky_node.metrics().generation_tokens == after.generation_tokens
    assert result.usage is not None
    visible = leaky_node.count_tokens(result.reasoning[0]) + leaky_node.count_tokens(
        result.content[0]
    )
    # Three cut attempts cost less than one uncut runaway (see "How far below" in conftest.py).
    assert visible <= result.usage.completion_tokens <= generated < MAX_TOKENS
    # Billing stays honest: the prompt was sent (and paid for) three times.
    assert result.usage.prompt_tokens > 0
    assert result.usage.total_tokens == result.usage.prompt_tokens + result.usage.completion_tokens


def test_ladder_nonstreaming(leaky_node) -> None:
    """Non-streaming: finish_reason length, three attempts, action finish."""
    completion, headers = leaky_node.complete(
        messages=leaky_node.messages("ladder-ns"), max_tokens=MAX_TOKENS
    )
    leaky_node.wait_idle(timeout=2.0)
    assert completion.choices[0].finish_reason == "length"
    assert headers.get("x-runaway-action") == "finish"
    assert headers.get("x-runaway-attempts") == "3"
    assert headers.get("x-runaway-detector")


def test_disconnect_during_reissue_stops_vllm(leaky_node, spawn_sidecar, budget_only_config,
                                              e2e_report) -> None:
    """A client leaving while the thinking-off reissue streams makes vLLM abort it too."""
    url = spawn_sidecar(leaky_node, budget_only_config)
    def fifteen_content(chunks: list[ChatCompletionChunk]) -> bool:
        # The first attempt is reasoning only: content means the reissue is streaming.
        return sum(any(c.delta.content for c in ch.choices) for ch in chunks) >= 15

    stream, before, tries = leaky_node.midway("disconnect-reissue", fifteen_content,
                                              base_url=url)
    stream.close()
    after, waited = leaky_node.wait_idle(timeout=1.0)
    time.sleep(0.5)
    settled = leaky_node.metrics()
    assert settled.generation_tokens == after.generation_tokens
    assert settled.success == before.success  # both attempts aborted, none finished
    e2e_report(
        "disconnect_during_reissue",
        tries=tries,
        idle_after_seconds=round(waited, 3),
        generation_tokens_delta=after.generation_tokens - before.generation_tokens,
    )
