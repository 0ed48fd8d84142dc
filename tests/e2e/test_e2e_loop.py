"""Real vLLM, thinking-loop model: cut, reissue with thinking off, salvage, modes, disconnect.

The sidecar under test runs with the config written by scripts/e2e-vllm.sh (section marked
``[e2e]``): mode enforce, ``reissue.ladder = ["no-think", "salvage"]``,
``reissue.max_attempts = 3``, runaway memory on. Every request uses a fresh user message so the
memory only recalls where a test wants it to.
"""

from __future__ import annotations

import re
import time

import pytest

pytestmark = pytest.mark.vllm

MAX_TOKENS = 8000  # what a runaway left alone would burn (max_model_len is 8192)
#: Most tokens a cut attempt may cost upstream (see "How far below" in conftest.py).
CUT_BOUND = MAX_TOKENS // 2
USAGE = {"stream_options": {"include_usage": True}}


def _loop_prefix(text: str, loop: str) -> bool:
    """Whether ``text`` is (a prefix of) the loop sentence repeated: nothing else leaked in."""
    return (loop * (len(text) // len(loop) + 2)).startswith(text)


def _actions(comments: list[str]) -> list[str]:
    found = [re.search(r"\baction=(\S+)", c) for c in comments if c.startswith("runaway")]
    return [m.group(1) for m in found if m]


def _answer_tokens(node) -> int:
    """Tokens vLLM generates for the thinking-off answer (end of turn included)."""
    direct, _ = node.complete(
        "vllm",
        messages=node.messages("answer-size"),
        max_tokens=64,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    assert direct.choices[0].message.content == node.script["answer"]
    return int(direct.usage.completion_tokens)


def test_thinking_loop_is_cut_and_reissue_answers(loop_node, e2e_report) -> None:
    """A <think> loop is cut early, vLLM stops, and thinking off answers in the same stream."""
    answer_tokens = _answer_tokens(loop_node)
    before, _ = loop_node.wait_idle()
    started = time.monotonic()
    result = loop_node.stream(messages=loop_node.messages("cut"), max_tokens=MAX_TOKENS, **USAGE)
    seconds = time.monotonic() - started
    after, waited = loop_node.wait_idle(timeout=2.0)
    time.sleep(0.5)
    settled = loop_node.metrics()
    generated = after.generation_tokens - before.generation_tokens
    e2e_report(
        "loop_cut_and_reissue",
        vllm_before=before.as_dict(),
        vllm_after=after.as_dict(),
        generation_tokens_delta=generated,
        client_usage=result.usage.model_dump() if result.usage else None,
        seconds=round(seconds, 3),
        idle_after_seconds=round(waited, 3),
        comments=result.comments,
    )

    script = loop_node.script
    assert result.errors == []
    assert result.done
    assert result.events_after_done == 0
    assert len(result.identity()) == 1, "one id/created/model from start to end"
    assert result.content == {0: script["answer"]}
    assert result.finish == {0: "stop"}
    assert result.reasoning[0]
    assert _loop_prefix(result.reasoning[0], script["thinking_loop"])
    assert _actions(result.comments) == ["reissue:no-think"]

    # The cut is visible upstream: nothing running, the counter stopped, and the tokens
    # generated are the cut attempt plus the answer, far below max_tokens.
    assert after.running == 0
    assert settled.generation_tokens == after.generation_tokens
    assert answer_tokens < generated < CUT_BOUND
    # Billing stays honest: the usage counts every token the client received, from both
    # attempts (vLLM coalesces tokens into one chunk when it runs ahead, so chunks are not
    # tokens), and never more than vLLM generated.
    assert result.usage is not None
    visible_reasoning = loop_node.count_tokens(result.reasoning[0])
    visible = visible_reasoning + loop_node.count_tokens(result.content[0])
    assert visible < result.usage.completion_tokens <= generated
    assert result.usage.completion_tokens_details is not None
    assert result.usage.completion_tokens_details.reasoning_tokens >= visible_reasoning
    assert result.usage.prompt_tokens > 0
    assert result.usage.total_tokens == result.usage.prompt_tokens + result.usage.completion_tokens


def test_nonstreaming_runaway_gets_answer_and_headers(loop_node) -> None:
    """A non-streaming client gets the reissued answer and the X-Runaway-* headers."""
    before, _ = loop_node.wait_idle()
    completion, headers = loop_node.complete(
        messages=loop_node.messages("nonstream"), max_tokens=MAX_TOKENS
    )
    after, _ = loop_node.wait_idle(timeout=2.0)
    choice = completion.choices[0]
    assert choice.message.content == loop_node.script["answer"]
    assert choice.finish_reason == "stop"
    assert headers.get("x-runaway-detector")
    assert headers.get("x-runaway-action") == "reissue"
    assert headers.get("x-runaway-attempts") == "2"
    reasoning = loop_node.reasoning_of(choice.message)
    if reasoning:  # the cut attempt's reasoning, if the sidecar keeps it, is only the loop
        assert _loop_prefix(reasoning, loop_node.script["thinking_loop"])
    assert completion.usage is not None
    visible = loop_node.count_tokens(reasoning or "") + loop_node.count_tokens(
        choice.message.content
    )
    generated = after.generation_tokens - before.generation_tokens
    assert visible <= completion.usage.completion_tokens <= generated
    assert after.generation_tokens - before.generation_tokens < CUT_BOUND


def test_n2_both_choices_reissued(loop_node) -> None:
    """With n=2 both looping choices are cut and both get the answer, in one stream."""
    before, _ = loop_node.wait_idle()
    result = loop_node.stream(
        messages=loop_node.messages("n2"), max_tokens=MAX_TOKENS, n=2, **USAGE
    )
    after, _ = loop_node.wait_idle(timeout=2.0)
    assert result.errors == []
    assert result.done
    assert len(result.identity()) == 1
    assert result.content == {0: loop_node.script["answer"], 1: loop_node.script["answer"]}
    assert result.finish == {0: "stop", 1: "stop"}
    assert result.comments
    generated = after.generation_tokens - before.generation_tokens
    assert generated < 2 * CUT_BOUND  # two choices
    assert result.usage is not None
    visible = sum(
        loop_node.count_tokens(result.reasoning[i]) + loop_node.count_tokens(result.content[i])
        for i in (0, 1)
    )
    assert visible <= result.usage.completion_tokens <= generated


def test_nonstreaming_n2(loop_node) -> None:
    """A non-streaming n=2 runaway returns two answered choices."""
    completion, headers = loop_node.complete(
        messages=loop_node.messages("n2-nonstream"), max_tokens=MAX_TOKENS, n=2
    )
    assert sorted(c.index for c in completion.choices) == [0, 1]
    assert {c.message.content for c in completion.choices} == {loop_node.script["answer"]}
    assert {c.finish_reason for c in completion.choices} == {"stop"}
    assert headers.get("x-runaway-action") == "reissue"


def test_mode_cut_ends_cleanly_without_reissue(loop_node) -> None:
    """X-Runaway-Mode: cut ends the stream with finish_reason length and no answer."""
    before, _ = loop_node.wait_idle()
    result = loop_node.stream(
        headers={"X-Runaway-Mode": "cut"},
        messages=loop_node.messages("mode-cut"),
        max_tokens=MAX_TOKENS,
        **USAGE,
    )
    after, _ = loop_node.wait_idle(timeout=2.0)
    assert result.done
    assert result.errors == []
    assert result.finish == {0: "length"}
    assert result.content.get(0, "") == ""
    assert _actions(result.comments) == ["cut"]
    assert result.usage is not None
    generated = after.generation_tokens - before.generation_tokens
    visible = loop_node.count_tokens(result.reasoning[0])
    assert visible <= result.usage.completion_tokens <= generated < CUT_BOUND


def test_mode_cut_nonstreaming_headers(loop_node) -> None:
    """Mode cut, non-streaming: finish_reason length and X-Runaway-Action cut."""
    completion, headers = loop_node.complete(
        headers={"X-Runaway-Mode": "cut"},
        messages=loop_node.messages("mode-cut-ns"),
        max_tokens=MAX_TOKENS,
    )
    assert completion.choices[0].finish_reason == "length"
    assert not completion.choices[0].message.content
    assert headers.get("x-runaway-action") == "cut"
    assert headers.get("x-runaway-attempts") == "1"


@pytest.mark.parametrize("mode", ["shadow", "off"])
def test_shadow_and_off_change_nothing(loop_node, mode) -> None:
    """Shadow and off relay the runaway exactly as vLLM sends it, to max_tokens."""
    body = {"messages": loop_node.messages(f"mode-{mode}"), "max_tokens": 600, **USAGE}
    direct = loop_node.stream("vllm", **body)
    proxied = loop_node.stream(headers={"X-Runaway-Mode": mode}, **body)
    assert proxied.reasoning == direct.reasoning
    assert proxied.content == direct.content
    assert proxied.usage == direct.usage
    assert proxied.finish == {0: "length"}
    assert proxied.comments == []


SALVAGE_CONFIG = """\
# [e2e-salvage] Assumed keys (sidecar/config.py ReissueConfig): the salvage step first.
mode = "enforce"
[reissue]
ladder = ["salvage"]
max_attempts = 2
[memory]
enabled = false
"""


def test_salvage_step_answers_on_real_vllm(loop_node, spawn_sidecar) -> None:
    """Salvage (continue_final_message) gives the answer as content, streaming."""
    url = spawn_sidecar(loop_node, SALVAGE_CONFIG)
    result = loop_node.stream(
        base_url=url, messages=loop_node.messages("salvage"), max_tokens=MAX_TOKENS, **USAGE
    )
    loop_node.wait_idle(timeout=2.0)
    assert result.errors == []
    assert result.done
    assert len(result.identity()) == 1
    assert result.content[0].strip() == loop_node.script["answer"]
    assert _loop_prefix(result.reasoning[0], loop_node.script["thinking_loop"])
    assert result.finish == {0: "stop"}
    assert _actions(result.comments) == ["reissue:salvage"]


def test_salvage_step_nonstreaming_moves_reasoning_to_content(loop_node, spawn_sidecar) -> None:
    """Salvage for a non-streaming client: vLLM's continuation ends up in content."""
    url = spawn_sidecar(loop_node, SALVAGE_CONFIG)
    completion, headers = loop_node.complete(
        base_url=url, messages=loop_node.messages("salvage-ns"), max_tokens=MAX_TOKENS
    )
    message = completion.choices[0].message
    assert (message.content or "").strip() == loop_node.script["answer"]
    assert loop_node.script["answer"] not in (loop_node.reasoning_of(message) or "")
    assert completion.choices[0].finish_reason == "stop"
    assert headers.get("x-runaway-action") == "reissue"
    assert headers.get("x-runaway-attempts") == "2"


@pytest.mark.parametrize("mode", ["shadow", "off"])
def test_client_disconnect_stops_vllm_within_a_second(loop_node, mode, e2e_report) -> None:
    """Closing the client stream makes vLLM abort the request in under a second."""
    stream, before, tries = loop_node.midway(
        f"disconnect-{mode}", lambda chunks: len(chunks) >= 20,
        headers={"X-Runaway-Mode": mode},
    )
    stream.close()
    after, waited = loop_node.wait_idle(timeout=1.0)
    time.sleep(0.5)
    settled = loop_node.metrics()
    assert settled.generation_tokens == after.generation_tokens
    # vLLM 0.32 does not count aborted requests at all: a request that ran to max_tokens
    # would show up as finished_reason "length".
    assert settled.success == before.success
    e2e_report(
        f"disconnect_{mode}",
        tries=tries,
        idle_after_seconds=round(waited, 3),
        generation_tokens_delta=after.generation_tokens - before.generation_tokens,
    )


def test_runaway_memory_skips_thinking_on_retry(loop_node) -> None:
    """The same prompt again goes straight to thinking off: vLLM generates only the answer."""
    answer_tokens = _answer_tokens(loop_node)
    messages = loop_node.messages("memory")
    first = loop_node.stream(messages=messages, max_tokens=MAX_TOKENS, **USAGE)
    assert _actions(first.comments) == ["reissue:no-think"]
    before, _ = loop_node.wait_idle(timeout=2.0)
    second = loop_node.stream(messages=messages, max_tokens=MAX_TOKENS, **USAGE)
    after, _ = loop_node.wait_idle(timeout=2.0)
    assert second.content == {0: loop_node.script["answer"]}
    assert second.reasoning.get(0, "") == ""
    assert second.finish == {0: "stop"}
    assert after.generation_tokens - before.generation_tokens == answer_tokens
