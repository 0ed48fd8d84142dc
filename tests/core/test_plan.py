"""Request planning as a table: config, headers, body and policy in, a plan or a refusal
out (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from detectors import DetectorConfig
from sidecar.apis.ollama.api import OLLAMA_CHAT
from sidecar.apis.openai.api import CHAT
from sidecar.config import Config, ModelOverride, PolicyConfig, PolicyRule
from sidecar.core.plan import Plan, Refusal, plan
from sidecar.core.wire import WireApi
from sidecar.policy.rules import Policy, rules_of

BODY: dict[str, Any] = {"model": "qwen3-8b", "messages": [{"role": "user", "content": "hi"}]}
OVERRIDE = ModelOverride(match="qwen", mode="cut", thinking_token_budget=500,
                         thinking_seconds_budget=30.0)
RULE = PolicyRule(name="big", model="qwen", thinking_token_budget=800, mode="shadow")


def run(*, cfg: Config | None = None, headers: dict[str, str] | None = None,
        body: dict[str, Any] | None = None, rules: tuple[PolicyRule, ...] = (),
        api: WireApi = CHAT) -> Plan | Refusal:
    config = cfg or Config()
    return plan(config, api, body or BODY, headers or {}, Policy(rules_of(rules, ())), "qwen3-8b")


def summary(result: Plan | Refusal) -> tuple[Any, ...]:
    if isinstance(result, Refusal):
        return ("refused", result.param)
    return (result.mode, result.detectors.thinking_token_budget,
            result.detectors.thinking_seconds_budget, result.decision.source,
            result.decision.thinking, result.budget_key, result.adaptive)


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({}, ("enforce", None, None, "default", None, "qwen3-8b|-", False)),
    ({"headers": {"X-Runaway-Mode": "loud"}}, ("refused", "X-Runaway-Mode")),
    ({"headers": {"X-Thinking": "maybe"}}, ("refused", "X-Thinking")),
    ({"headers": {"X-Thinking-Budget": "lots"}}, ("refused", "thinking_token_budget")),
    ({"body": {**BODY, "thinking_token_budget": True}}, ("refused", "thinking_token_budget")),
    ({"headers": {"X-Runaway-Mode": "shadow"}},
     ("shadow", None, None, "default", None, "qwen3-8b|-", False)),
    # the model's [[models]] entry: its mode, token and seconds budgets
    ({"cfg": Config(models=(OVERRIDE,))},
     ("cut", 500, 30.0, "default", None, "qwen3-8b|-", False)),
    # a policy rule beats the model entry for mode and budget; the header beats the rule
    ({"cfg": Config(models=(OVERRIDE,)), "rules": (RULE,)},
     ("shadow", 800, 30.0, "rule", None, "qwen3-8b|big", False)),
    ({"cfg": Config(models=(OVERRIDE,)), "rules": (RULE,),
      "headers": {"X-Runaway-Mode": "enforce"}},
     ("enforce", 800, 30.0, "rule", None, "qwen3-8b|big", False)),
    # budgets: header, then body, then rule
    ({"rules": (RULE,), "body": {**BODY, "thinking_token_budget": 200},
      "headers": {"X-Thinking-Budget": "100"}},
     ("shadow", 100, None, "rule", None, "qwen3-8b|big", False)),
    ({"rules": (RULE,), "body": {**BODY, "thinking_token_budget": 200}},
     ("shadow", 200, None, "rule", None, "qwen3-8b|big", False)),
    # the server default applies when nothing else sets a budget
    ({"cfg": Config(detectors=DetectorConfig(thinking_token_budget=4096))},
     ("enforce", 4096, None, "default", None, "qwen3-8b|-", False)),
    # adaptive: only without a budget, and not when thinking is off
    ({"cfg": Config(policy=PolicyConfig(adaptive_budget=True))},
     ("enforce", None, None, "default", None, "qwen3-8b|-", True)),
    ({"cfg": Config(policy=PolicyConfig(adaptive_budget=True)),
      "headers": {"X-Thinking-Budget": "64"}},
     ("enforce", 64, None, "default", None, "qwen3-8b|-", False)),
    ({"cfg": Config(policy=PolicyConfig(adaptive_budget=True)), "headers": {"X-Thinking": "off"}},
     ("enforce", None, None, "header", "off", "qwen3-8b|-", False)),
    # the client's own switch wins over the header, read by each API in its own field
    ({"body": {**BODY, "chat_template_kwargs": {"enable_thinking": False}},
      "headers": {"X-Thinking": "on"}},
     ("enforce", None, None, "client", "off", "qwen3-8b|-", False)),
    ({"api": OLLAMA_CHAT, "body": {**BODY, "think": True}, "headers": {"X-Thinking": "off"}},
     ("enforce", None, None, "client", "on", "qwen3-8b|-", False)),
])
def test_plan_table(kwargs: dict[str, Any], expected: tuple[Any, ...]) -> None:
    """Each request gives this mode, these budgets, this decision and budget key."""
    assert summary(run(**kwargs)) == expected


def test_without_budgets_the_detector_config_is_the_configs_own() -> None:
    """No budget to set: the plan shares the config's detector settings (no copy per
    request)."""
    cfg = Config()
    result = run(cfg=cfg)
    assert isinstance(result, Plan)
    assert result.detectors is cfg.detectors


def test_the_adaptive_budget_is_filled_in_later() -> None:
    """``with_token_budget`` sets the fetched adaptive budget; None (too few samples yet)
    leaves the plan as it was."""
    result = run(cfg=Config(policy=PolicyConfig(adaptive_budget=True)))
    assert isinstance(result, Plan)
    assert result.with_token_budget(None) is result
    assert result.with_token_budget(1200).detectors.thinking_token_budget == 1200


def test_a_models_detector_thresholds_apply_to_its_requests() -> None:
    """A ``[[models]]`` entry's ``detectors`` table replaces those thresholds for the
    models it matches, and only for them; budgets still come from their own levels."""
    entry = ModelOverride(match="qwen", thinking_token_budget=700,
                          detectors={"recurrence_evidence": 3.0, "restatement_copies": 11})
    cfg = Config(models=(entry,))
    result = run(cfg=cfg)
    assert isinstance(result, Plan)
    assert result.detectors.recurrence_evidence == 3.0
    assert result.detectors.restatement_copies == 11
    assert result.detectors.thinking_token_budget == 700
    assert result.detectors.sentences_repeat_chars == cfg.detectors.sentences_repeat_chars
    other = run(cfg=cfg, body={**BODY, "model": "glm-z1"})
    assert isinstance(other, Plan)
    assert other.detectors is cfg.detectors
