"""Real llama.cpp, thinking-loop model: cut, reissue with thinking off, splice; disconnect.

The sidecar under test runs with the config written by scripts/e2e-llamacpp.sh (section
marked ``[e2e-llamacpp]``): ``dialect = "llamacpp"``, mode enforce,
``reissue.ladder = ["no-think"]``, ``reissue.max_attempts = 3``, runaway memory on. Every
request uses a fresh user message so the memory only recalls where a test wants it to.
"""

from __future__ import annotations

import re
import time

import pytest

pytestmark = pytest.mark.llamacpp

MAX_TOKENS = 4000  # what a runaway left alone would burn (one slot holds 4096 tokens)
#: Most tokens a cut attempt may cost upstream: loose on purpose (measured: about 240 for
#: the cut attempt and the answer together; see the conftest's docstring).
CUT_BOUND = MAX_TOKENS // 2
USAGE = {"stream_options": {"include_usage": True}}
#: What llama.cpp puts before the thinking-off answer: the template pre-fills
#: "<think>\n\n</think>\n\n" and llama.cpp parses that tail of the prompt with the output,
#: so the "\n\n" after </think> arrives as content (the model generates only the answer:
#: ``completion_tokens`` counts it alone). vLLM sends the answer alone.
THINK_OFF_PREFIX = "\n\n"


def _loop_prefix(text: str, loop: str) -> bool:
    """Whether ``text`` is (a prefix of) the loop sentence repeated: nothing else leaked in."""
    return (loop * (len(text) // len(loop) + 2)).startswith(text)


def _actions(comments: list[str]) -> list[str]:
    found = [re.search(r"\baction=(\S+)", c) for c in comments if c.startswith("runaway")]
    return [m.group(1) for m in found if m]


def _answer_tokens(node) -> int:
    """Tokens llama.cpp generates for the thinking-off answer (end of turn included)."""
    direct, _, _ = node.complete(
        "llamacpp",
        messages=node.messages("answer-size"),
        max_tokens=64,
        reasoning_effort="none",
    )
    assert direct.choices[0].message.content == "\n\n" + node.script["answer"]
    return int(direct.usage.completion_tokens)


def test_thinking_loop_is_cut_and_reissue_answers(loop_node, e2e_report) -> None:
    """A <think> loop is cut early, its slot is freed, and thinking off answers in the same
    stream: one id, the loop's reasoning, then the answer, usage of both attempts."""
    answer_tokens = _answer_tokens(loop_node)
    loop_node.wait_idle()
    before = loop_node.predicted()
    started = time.monotonic()
    result = loop_node.stream(messages=loop_node.messages("cut"), max_tokens=MAX_TOKENS, **USAGE)
    seconds = time.monotonic() - started
    waited = loop_node.wait_idle(timeout=2.0)
    generated = loop_node.predicted() - before
    e2e_report("llamacpp_loop_cut_and_reissue", generated=generated, seconds=round(seconds, 3),
               idle_after_seconds=round(waited, 3), comments=result.comments,
               client_usage=result.usage.model_dump() if result.usage else None)

    script = loop_node.script
    assert result.errors == []
    assert result.done
    assert result.events_after_done == 0
    assert len(result.identity()) == 1, "one id and model from start to end"
    assert result.content == {0: THINK_OFF_PREFIX + script["answer"]}
    assert result.finish == {0: "stop"}
    assert result.reasoning[0]
    assert _loop_prefix(result.reasoning[0], script["thinking_loop"])
    assert _actions(result.comments) == ["reissue:no-think"]
    # Both attempts ended on the server, far below max_tokens: the cut reached llama.cpp.
    assert answer_tokens < generated < CUT_BOUND
    # Billing: every token the client received, from both attempts, and never more than
    # llama.cpp generated.
    assert result.usage is not None
    visible = loop_node.count_tokens(result.reasoning[0]) + loop_node.count_tokens(
        result.content[0].removeprefix(THINK_OFF_PREFIX))
    assert visible <= result.usage.completion_tokens <= generated
    assert result.usage.prompt_tokens > 0
    assert result.usage.total_tokens == result.usage.prompt_tokens + result.usage.completion_tokens


def test_nonstreaming_runaway_gets_answer_and_headers(loop_node) -> None:
    """A non-streaming client gets the reissued answer and the X-Runaway-* headers."""
    loop_node.wait_idle()
    before = loop_node.predicted()
    completion, headers, _ = loop_node.complete(
        messages=loop_node.messages("nonstream"), max_tokens=MAX_TOKENS
    )
    loop_node.wait_idle(timeout=2.0)
    generated = loop_node.predicted() - before
    choice = completion.choices[0]
    assert choice.message.content == THINK_OFF_PREFIX + loop_node.script["answer"]
    assert choice.finish_reason == "stop"
    assert headers.get("x-runaway-detector")
    assert headers.get("x-runaway-action") == "reissue"
    assert headers.get("x-runaway-attempts") == "2"
    reasoning = (choice.message.model_extra or {}).get("reasoning_content") or ""
    assert _loop_prefix(reasoning, loop_node.script["thinking_loop"])
    assert completion.usage is not None
    visible = loop_node.count_tokens(reasoning) + loop_node.count_tokens(
        choice.message.content.removeprefix(THINK_OFF_PREFIX))
    assert visible <= completion.usage.completion_tokens <= generated < CUT_BOUND


def test_n2_both_choices_reissued(loop_node) -> None:
    """With n=2 (llama.cpp runs each choice as its own task, in two slots) both looping
    choices are cut and both get the answer, in one stream."""
    loop_node.wait_idle()
    before = loop_node.predicted()
    result = loop_node.stream(messages=loop_node.messages("n2"), max_tokens=MAX_TOKENS, n=2,
                              **USAGE)
    loop_node.wait_idle(timeout=2.0)
    generated = loop_node.predicted() - before
    answer = THINK_OFF_PREFIX + loop_node.script["answer"]
    assert result.errors == []
    assert result.done
    assert len(result.identity()) == 1
    assert result.content == {0: answer, 1: answer}
    assert result.finish == {0: "stop", 1: "stop"}
    assert _actions(result.comments) == ["reissue:no-think"]
    assert generated < 2 * CUT_BOUND
    assert result.usage is not None
    assert result.usage.completion_tokens <= generated


def test_mode_cut_ends_cleanly_without_reissue(loop_node) -> None:
    """X-Runaway-Mode: cut ends the stream with finish_reason length and no answer."""
    loop_node.wait_idle()
    before = loop_node.predicted()
    result = loop_node.stream(headers={"X-Runaway-Mode": "cut"},
                              messages=loop_node.messages("mode-cut"), max_tokens=MAX_TOKENS,
                              **USAGE)
    loop_node.wait_idle(timeout=2.0)
    assert result.done
    assert result.errors == []
    assert result.finish == {0: "length"}
    assert result.content.get(0, "") == ""
    assert _actions(result.comments) == ["cut"]
    assert result.usage is not None
    assert result.usage.completion_tokens <= loop_node.predicted() - before < CUT_BOUND


@pytest.mark.parametrize("mode", ["shadow", "off"])
def test_shadow_and_off_relay_the_runaway(loop_node, mode) -> None:
    """Shadow and off relay the loop exactly as llama.cpp sends it, to max_tokens."""
    body = {"messages": loop_node.messages(f"mode-{mode}"), "max_tokens": 600, **USAGE}
    direct = loop_node.stream("llamacpp", **body)
    proxied = loop_node.stream(headers={"X-Runaway-Mode": mode}, **body)
    assert proxied.reasoning == direct.reasoning
    assert _loop_prefix(proxied.reasoning[0], loop_node.script["thinking_loop"])
    assert proxied.content == direct.content == {0: ""}
    # (The prompt cache's share, prompt_tokens_details.cached_tokens, depends on what the
    # slot served before; the healthy tests compare whole bodies with the cache warmed.)
    assert proxied.usage is not None
    assert direct.usage is not None
    assert proxied.usage.completion_tokens == direct.usage.completion_tokens == 600
    assert proxied.usage.prompt_tokens == direct.usage.prompt_tokens
    assert proxied.finish == {0: "length"}
    assert proxied.comments == []


def test_runaway_memory_skips_thinking_on_retry(loop_node) -> None:
    """The same prompt again goes straight to thinking off: llama.cpp generates only the
    answer."""
    answer_tokens = _answer_tokens(loop_node)
    messages = loop_node.messages("memory")
    first = loop_node.stream(messages=messages, max_tokens=MAX_TOKENS, **USAGE)
    assert _actions(first.comments) == ["reissue:no-think"]
    loop_node.wait_idle(timeout=2.0)
    before = loop_node.predicted()
    second = loop_node.stream(messages=messages, max_tokens=MAX_TOKENS, **USAGE)
    loop_node.wait_idle(timeout=2.0)
    assert second.content == {0: THINK_OFF_PREFIX + loop_node.script["answer"]}
    assert second.reasoning.get(0, "") == ""
    assert second.finish == {0: "stop"}
    assert loop_node.predicted() - before == answer_tokens


SALVAGE_CONFIG = """\
# [e2e-llamacpp-salvage] The salvage step first: llama.cpp honours continue_final_message.
mode = "enforce"
dialect = "llamacpp"
[reissue]
ladder = ["salvage"]
max_attempts = 2
[memory]
enabled = false
"""


def test_salvage_step_answers_on_real_llamacpp(loop_node, spawn_sidecar) -> None:
    """Salvage (the cut reasoning sent back as a final assistant message to continue)
    gives the answer as content after the loop's reasoning, streaming."""
    url = spawn_sidecar(loop_node, SALVAGE_CONFIG)
    result = loop_node.stream(base_url=url, messages=loop_node.messages("salvage"),
                              max_tokens=MAX_TOKENS, **USAGE)
    loop_node.wait_idle(timeout=2.0)
    assert result.errors == []
    assert result.done
    assert len(result.identity()) == 1
    assert result.content == {0: loop_node.script["answer"]}
    assert _loop_prefix(result.reasoning[0], loop_node.script["thinking_loop"])
    assert result.finish == {0: "stop"}
    assert _actions(result.comments) == ["reissue:salvage"]


def test_salvage_step_nonstreaming(loop_node, spawn_sidecar) -> None:
    """Salvage for a non-streaming client: the answer in content, two attempts."""
    url = spawn_sidecar(loop_node, SALVAGE_CONFIG)
    completion, headers, _ = loop_node.complete(
        base_url=url, messages=loop_node.messages("salvage-ns"), max_tokens=MAX_TOKENS)
    message = completion.choices[0].message
    assert message.content == loop_node.script["answer"]
    assert completion.choices[0].finish_reason == "stop"
    assert headers.get("x-runaway-action") == "reissue"
    assert headers.get("x-runaway-attempts") == "2"
