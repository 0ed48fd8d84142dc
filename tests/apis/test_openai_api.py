"""OpenAI chat completions and completions as wire APIs (``sidecar.apis.openai.api``):
reissue bodies change only the documented fields (pure)."""

from __future__ import annotations

from typing import Any

from sidecar.apis.openai.api import no_think_body, salvage_body
from sidecar.config import DEFAULT_THINKING_OFF_RULES
from sidecar.core.bodies import (
    deep_merge,
    prompt_fingerprint,
    thinking_disabled,
    thinking_off_patch,
    useful_reasoning,
)

BODY: dict[str, Any] = {
    "model": "Qwen/Qwen3-8B",
    "messages": [{"role": "user", "content": "fix"}],
    "tools": [{"type": "function", "function": {"name": "run", "parameters": {}}}],
    "response_format": {"type": "json_object"},
    "temperature": 0.6, "top_p": 0.95, "seed": 7, "logprobs": True, "top_logprobs": 2,
    "max_tokens": 4096, "stream": True,
    "chat_template_kwargs": {"custom": 1},
}


def test_family_table_defaults() -> None:
    """Qwen3/GLM/Nemotron use enable_thinking, DeepSeek/Kimi thinking, others reasoning_effort."""
    rules = DEFAULT_THINKING_OFF_RULES
    assert thinking_off_patch("Qwen/Qwen3-30B-A3B", rules) == {
        "chat_template_kwargs": {"enable_thinking": False}}
    assert thinking_off_patch("zai-org/GLM-4.6", rules) == {
        "chat_template_kwargs": {"enable_thinking": False}}
    assert thinking_off_patch("nvidia/Nemotron-Nano", rules)["chat_template_kwargs"] == {
        "enable_thinking": False}
    assert thinking_off_patch("deepseek-ai/DeepSeek-V3.1", rules) == {
        "chat_template_kwargs": {"thinking": False}}
    assert thinking_off_patch("moonshotai/Kimi-K2", rules) == {
        "chat_template_kwargs": {"thinking": False}}
    assert thinking_off_patch("some-model", rules) == {"reasoning_effort": "none"}


def test_no_think_preserves_everything_else() -> None:
    """Only the thinking switch changes; tools, format, sampling and logprobs stay."""
    out = no_think_body(BODY, DEFAULT_THINKING_OFF_RULES, client_stream=True, open_choices=1)
    expected = dict(BODY)
    expected["chat_template_kwargs"] = {"custom": 1, "enable_thinking": False}
    # Reissues always stream with cumulative usage, so the sidecar counts them exactly.
    expected["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    assert out == expected
    assert BODY["chat_template_kwargs"] == {"custom": 1}  # the input is not mutated


def test_no_think_nonstreaming_and_n() -> None:
    """A non-streaming client's reissue streams with usage; n follows the open choices."""
    body = {**BODY, "stream": False, "n": 3}
    out = no_think_body(body, DEFAULT_THINKING_OFF_RULES, client_stream=False, open_choices=2)
    assert out["stream"] is True
    assert out["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert out["n"] == 2


def test_fallback_model_uses_its_own_family_switch() -> None:
    """``fallback:MODEL`` swaps the model and applies that model's thinking switch."""
    out = no_think_body(BODY, DEFAULT_THINKING_OFF_RULES, client_stream=True, open_choices=1,
                        model="deepseek-ai/DeepSeek-V3.1")
    assert out["model"] == "deepseek-ai/DeepSeek-V3.1"
    assert out["chat_template_kwargs"] == {"custom": 1, "thinking": False}


def test_salvage_body() -> None:
    """Salvage appends the useful reasoning as a closed assistant prefix to continue."""
    out = salvage_body(BODY, "Step 1: read the stack trace.", client_stream=True)
    assert out is not None
    assert out["messages"][-1] == {
        "role": "assistant", "content": "<think>\nStep 1: read the stack trace.\n</think>\n\n"}
    assert out["continue_final_message"] is True
    assert out["add_generation_prompt"] is False
    assert out["tools"] == BODY["tools"]
    assert salvage_body({**BODY, "n": 2}, "x", client_stream=True) is None
    assert salvage_body({"prompt": "x"}, "x", client_stream=True) is None


def test_useful_reasoning_stops_at_the_loop() -> None:
    """The salvaged reasoning is what came before the repeating unit first appeared,
    wherever in the unit the detector's excerpt starts."""
    intro = "First, the parser indexes [0] without a guard!\n"
    unit = "Hmm, maybe I was wrong so I should re-check every step. "
    text = intro + unit * 5
    assert useful_reasoning(text, unit) == intro
    rotated = unit[20:] + unit[:20]
    assert useful_reasoning(text, rotated) == intro
    assert useful_reasoning(unit * 5, rotated) == ""  # a loop from the first token
    assert useful_reasoning(text, "") == text  # a budget verdict: all of it was useful
    assert useful_reasoning(text, "never said") == ""


def test_thinking_disabled_switches() -> None:
    """Every known client-side switch counts as thinking already off."""
    assert thinking_disabled({"chat_template_kwargs": {"enable_thinking": False}})
    assert thinking_disabled({"chat_template_kwargs": {"thinking": False}})
    assert thinking_disabled({"reasoning_effort": "none"})
    assert not thinking_disabled(BODY)


def test_deep_merge_and_fingerprint() -> None:
    """Merges are deep and copy-on-write; fingerprints ignore sampling but not the prompt."""
    assert deep_merge({"a": {"b": 1}}, {"a": {"c": 2}}) == {"a": {"b": 1, "c": 2}}
    assert prompt_fingerprint(BODY) == prompt_fingerprint({**BODY, "temperature": 0.1})
    other = {**BODY, "messages": [{"role": "user", "content": "other"}]}
    assert prompt_fingerprint(BODY) != prompt_fingerprint(other)
    assert len(prompt_fingerprint(BODY)) == 32
