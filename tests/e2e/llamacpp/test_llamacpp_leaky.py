"""Real llama.cpp, leaky model (loops in content with thinking off): the ladder ends cleanly.

Sidecar config from scripts/e2e-llamacpp.sh (``[e2e-llamacpp]``): ``reissue.ladder =
["no-think", "salvage"]``, ``reissue.max_attempts = 3``. Thinking loops and is cut;
thinking off answers, then loops in content and is cut again; salvage loops in content too
and is cut; the ladder is spent, so the response ends with finish_reason ``length``.
"""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.llamacpp

MAX_TOKENS = 4000
USAGE = {"stream_options": {"include_usage": True}}


def _actions(comments: list[str]) -> list[str]:
    found = [re.search(r"\baction=(\S+)", c) for c in comments if c.startswith("runaway")]
    return [m.group(1) for m in found if m]


def _loop_prefix(text: str, loop: str) -> bool:
    return (loop * (len(text) // len(loop) + 2)).startswith(text)


def test_content_loop_is_cut_and_the_ladder_ends_with_length(leaky_node, e2e_report) -> None:
    """Every attempt runs away; the client gets one clean stream ending in length, with
    the answer and the content loop's start, and every slot is free after it."""
    leaky_node.wait_idle()
    before = leaky_node.predicted()
    result = leaky_node.stream(messages=leaky_node.messages("ladder"), max_tokens=MAX_TOKENS,
                               **USAGE)
    waited = leaky_node.wait_idle(timeout=2.0)
    generated = leaky_node.predicted() - before
    e2e_report("llamacpp_leaky_ladder", generated=generated, comments=result.comments,
               idle_after_seconds=round(waited, 3),
               client_usage=result.usage.model_dump() if result.usage else None)

    script = leaky_node.script
    assert result.errors == []
    assert result.done
    assert result.events_after_done == 0
    assert len(result.identity()) == 1
    assert result.finish == {0: "length"}
    assert _actions(result.comments) == ["reissue:no-think", "reissue:salvage", "finish"]
    assert any("channel=content" in c for c in result.comments), result.comments
    assert _loop_prefix(result.reasoning[0], script["thinking_loop"])
    head = "\n\n" + script["answer"]  # see THINK_OFF_PREFIX in test_llamacpp_loop.py
    assert result.content[0].startswith(head)
    assert script["answer"] in result.content[0][len(head):]  # salvage answered again
    assert result.usage is not None
    # (The leading "\n\n" of the content is the prompt's, not generated: not counted.)
    visible = leaky_node.count_tokens(result.reasoning[0]) + leaky_node.count_tokens(
        result.content[0][2:])
    # Three cut attempts cost less than one uncut runaway; billing counts them all. (The
    # prompt tokens are not checked: llama.cpp reports usage only at the end of a stream,
    # so when every attempt is cut the sidecar has no prompt count to bill.)
    assert visible <= result.usage.completion_tokens <= generated < MAX_TOKENS


def test_content_loop_nonstreaming(leaky_node) -> None:
    """A non-streaming client gets the answer, the loop's start, length, and the headers."""
    completion, headers, _ = leaky_node.complete(
        messages=leaky_node.messages("ladder-ns"), max_tokens=MAX_TOKENS)
    leaky_node.wait_idle(timeout=2.0)
    choice = completion.choices[0]
    assert choice.finish_reason == "length"
    assert (choice.message.content or "").startswith("\n\n" + leaky_node.script["answer"])
    assert headers.get("x-runaway-action") == "finish"
    assert headers.get("x-runaway-attempts") == "3"
