"""The simulator's pure parts: tokenizer, engine, wire encoder, fault headers, traces."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.simulator.chat.vllm import VllmChat
from sidecar.simulator.common.openai_wire import OpenAIServer, StreamIdentity, Usage
from sidecar.simulator.common.thinking import thinking_enabled
from sidecar.simulator.engine.behaviours import LOOP_TOKENS, Behaviours, load_traces, split_trace
from sidecar.simulator.engine.faults import Fault, FaultHeaderError, FaultKind, parse_fault
from sidecar.simulator.engine.generation import (
    Channel,
    GenSpec,
    Mode,
    RepetitionParams,
    Script,
    generate,
    interleave,
)
from sidecar.simulator.engine.tokenizer import (
    render_chat,
    think_state_of_prompt,
    token_id,
    tokenize,
)

IDENT = StreamIdentity("chatcmpl-x", 1, "m")


def _script(reasoning: list[str], answer: list[str], *, closes: bool = True) -> Script:
    return Script(
        reasoning=lambda: iter(reasoning),
        after_thinking=lambda: iter(answer),
        direct=lambda: iter(answer),
        reasoning_closes=closes,
    )


@given(st.text())
def test_tokenize_round_trips(text: str) -> None:
    """Joining the tokens gives the text back, whatever the text."""
    tokens = tokenize(text)
    assert "".join(tokens) == text
    assert all(tokens)


def test_tokenize_shapes() -> None:
    """Words keep their leading space; punctuation, digits and Hangul are single tokens."""
    assert tokenize(" re-check 42, 잠깐") == [" re", "-", "check", " 4", "2", ",", " 잠", "깐"]
    assert tokenize("<think>\n\n</think>") == ["<think>", "\n\n", "</think>"]


def test_capture_prompt_counts() -> None:
    """The captures' prompt is 9 tokens; thinking off adds the 4-token empty think block."""
    msgs = [{"role": "user", "content": "Hello"}]
    on = render_chat(msgs, add_generation_prompt=True, continue_final_message=False, thinking=True)
    off = render_chat(
        msgs, add_generation_prompt=True, continue_final_message=False, thinking=False
    )
    assert len(tokenize(on)) == 9
    assert len(tokenize(off)) == 13


def test_token_ids_are_stable_and_specials_distinct() -> None:
    """Token ids do not depend on the process; special tokens get reserved ids."""
    assert token_id(" Hmm") == token_id(" Hmm")
    assert token_id("<think>") != token_id("</think>")
    assert token_id("<think>") >= 151_643


def test_think_state_of_prompt() -> None:
    """The newest think tag decides where a raw prompt leaves the model."""
    assert think_state_of_prompt("a<think>b") == "open"
    assert think_state_of_prompt("<think>b</think>c") == "closed"
    assert think_state_of_prompt("plain") == "none"


def test_generate_counts_specials_but_hides_them() -> None:
    """<think>, </think> and EOS count as completion tokens with no visible text."""
    tokens = list(generate(_script(["a", "b"], ["c"]), GenSpec(100, Mode.THINK)))
    assert [(t.text, t.channel) for t in tokens] == [
        ("", Channel.SPECIAL),
        ("a", Channel.REASONING),
        ("b", Channel.REASONING),
        ("", Channel.SPECIAL),
        ("c", Channel.CONTENT),
        ("", Channel.SPECIAL),
    ]
    assert tokens[-1].finish_reason == "stop"
    assert tokens[-1].completion_tokens == 6
    assert tokens[-1].reasoning_tokens == 2


def test_budget_zero_closes_thinking_at_once() -> None:
    """A budget of 0 forces </think> right after <think>."""
    script = _script(["a"] * 10, ["x"])
    tokens = list(generate(script, GenSpec(100, Mode.THINK, thinking_budget=0)))
    assert [t.channel for t in tokens[:3]] == [Channel.SPECIAL, Channel.SPECIAL, Channel.CONTENT]
    assert tokens[-1].reasoning_tokens == 0


def test_trace_cut_inside_think_ends_with_length() -> None:
    """A trace whose thinking never closed ends on its last token with length."""
    tokens = list(generate(_script(["a", "b"], [], closes=False), GenSpec(100, Mode.THINK)))
    assert tokens[-1].text == "b"
    assert tokens[-1].finish_reason == "length"


def test_repetition_detection_needs_min_count_runs() -> None:
    """Detection fires when the pattern has repeated min_count times back to back."""
    loop = list(LOOP_TOKENS)
    script = Script(lambda: itertools.cycle(loop), lambda: iter(()), lambda: iter(()))
    spec = GenSpec(1000, Mode.THINK, repetition=RepetitionParams(64, 4, 3))
    tokens = list(generate(script, spec))
    assert len(tokens) == 1 + 3 * len(loop)
    assert tokens[-1].finish_reason == "repetition"
    assert tokens[-1].stop_reason == "repetition_detected"


def test_continue_mode_routes_to_reasoning() -> None:
    """CONTINUE: the answer arrives in the reasoning channel (vLLM 0.32's parser state)."""
    tokens = list(generate(_script([], ["ok"]), GenSpec(10, Mode.CONTINUE)))
    assert [(t.text, t.channel) for t in tokens] == [
        ("ok", Channel.REASONING),
        ("", Channel.SPECIAL),
    ]


def test_interleave_matches_captured_n2_order() -> None:
    """Choice 1 runs one engine step behind choice 0, as in chat_n2.sse."""
    spec = GenSpec(3, Mode.NO_THINK)
    script = _script([], ["a", "b", "c", "d"])
    steps = list(interleave([generate(script, spec), generate(script, spec)]))
    order = [index for step in steps for index, _ in step]
    assert order == [0, 0, 1, 0, 1, 1]


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


def test_fault_headers() -> None:
    """Fault names, counts and delays are read from headers, and bad ones are refused."""
    assert parse_fault({}) is None
    assert parse_fault({"X-Sim-Fault": "no-done"}) == Fault(FaultKind.NO_DONE)
    got = parse_fault({"X-Sim-Fault": "reset-mid-stream", "X-Sim-Fault-After": "2"})
    assert got == Fault(FaultKind.RESET_MID_STREAM, after=2, after_given=True)
    assert parse_fault({"X-Sim-Fault": "slow-first-token", "X-Sim-Fault-Delay": "0.5"}) == Fault(
        FaultKind.SLOW_FIRST_TOKEN, delay=0.5
    )
    for bad in (
        {"X-Sim-Fault": "boom"},
        {"X-Sim-Fault": "no-done", "X-Sim-Fault-After": "x"},
        {"X-Sim-Fault": "no-done", "X-Sim-Fault-After": "-1"},
        {"X-Sim-Fault": "slow-first-token", "X-Sim-Fault-Delay": "nan"},
    ):
        with pytest.raises(FaultHeaderError):
            parse_fault(bad)


def test_thinking_switches() -> None:
    """Only chat_template_kwargs and reasoning_effort turn thinking off."""
    assert thinking_enabled({})
    assert not thinking_enabled({"chat_template_kwargs": {"enable_thinking": False}})
    assert not thinking_enabled({"chat_template_kwargs": {"thinking": False}})
    assert not thinking_enabled({"reasoning_effort": "none"})
    assert thinking_enabled({"reasoning_effort": "low"})
    assert thinking_enabled(
        {"reasoning_effort": "none", "chat_template_kwargs": {"enable_thinking": True}}
    )
    assert thinking_enabled({"thinking": False})


def test_split_trace_variants() -> None:
    """Traces split into reasoning and content on the think tags, however they appear."""
    assert split_trace("a", "<think>r</think>c").reasoning == "r"
    assert split_trace("a", "r</think>c").content == "c"
    assert split_trace("a", "only content").reasoning is None
    assert not split_trace("a", "<think>never closed").closed
    with pytest.raises(TypeError):
        load_traces(['{"no_text": 1}'])


def test_long_thinking_chains_different_traces() -> None:
    """sim-long-thinking moves on to another real trace instead of looping one."""
    behaviours = Behaviours(seed=0, served_model_name=None, replay_file=None)
    script = behaviours.script("sim-long-thinking", key="k", choice=0)
    text = "".join(itertools.islice(script.reasoning(), 20_000))
    assert text.count("Okay") >= 3
    assert len(text) > 30_000


def test_long_thinking_has_no_exact_repeat_within_default_context() -> None:
    """Within the default 8192-token context no 30-token run of the chain comes back."""
    behaviours = Behaviours(seed=0, served_model_name=None, replay_file=None)
    for key in ("a", "b", "c"):
        tokens = list(
            itertools.islice(
                behaviours.script("sim-long-thinking", key=key, choice=0).reasoning(), 8192
            )
        )
        grams = {tuple(tokens[i : i + 30]) for i in range(len(tokens) - 29)}
        assert len(grams) == len(tokens) - 29
