"""Request planning: before the first token, decide a watched request's mode, thinking
policy and budgets (pure).

:func:`plan` reads the config snapshot, the request's per-request controls (headers,
the body's own budget field) and the policy's decision, and returns a :class:`Plan`, or a
:class:`Refusal` when a control is malformed (the client gets a 400 naming it).

Precedence:

- mode: the ``X-Runaway-Mode`` header, the policy rule's mode, the model's ``[[models]]``
  mode, the global ``mode``;
- thinking-token budget: the ``X-Thinking-Budget`` header, the body's own field, the
  policy rule's budget, the model's budget, ``[detectors] thinking_token_budget``; when
  none is set and ``policy.adaptive_budget`` is on (and thinking is not off), the adaptive
  budget, which the I/O layer fetches (``Plan.adaptive``), possibly from Redis;
- wall-clock budget: the model's, else ``[detectors] thinking_seconds_budget``;
- detector thresholds: the model's ``detectors`` table over ``[detectors]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from detectors import DetectorConfig, resolve_thinking_budget
from sidecar.config import Config, model_override
from sidecar.core.wire import WireApi
from sidecar.labels import MODES, Mode
from sidecar.policy.rules import Decision, Policy, header_thinking


@dataclass(frozen=True, slots=True)
class Plan:
    """What a watched request runs with."""

    mode: Mode
    #: The detector settings with this request's budgets.
    detectors: DetectorConfig
    #: The policy's decision, and why.
    decision: Decision
    #: Model and rule: the key of the adaptive budget this request feeds and reads.
    budget_key: str
    #: No budget was set: ask for the adaptive one (:meth:`with_token_budget`).
    adaptive: bool

    def with_token_budget(self, budget: int | None) -> Plan:
        """The plan with the adaptive thinking-token budget ``budget`` (None: none yet)."""
        if budget is None:
            return self
        return replace(self, detectors=replace(self.detectors, thinking_token_budget=budget))


@dataclass(frozen=True, slots=True)
class Refusal:
    """A per-request control is malformed: the client gets a 400 with ``message``."""

    message: str
    param: str


def plan(cfg: Config, api: WireApi, body: Mapping[str, Any], headers: Mapping[str, str],
         policy: Policy, model_label: str) -> Plan | Refusal:
    """The plan for ``body`` sent to ``api`` with ``headers`` (see the module docstring);
    ``model_label`` is the model's metric label, part of the adaptive budget's key."""
    model = body.get("model")
    override = model_override(cfg, model if isinstance(model, str) else "")
    header_mode: Mode | None = None
    given = headers.get("X-Runaway-Mode")
    if given is not None:
        if given not in MODES:
            return Refusal("X-Runaway-Mode must be one of enforce, cut, shadow, off",
                           "X-Runaway-Mode")
        header_mode = given
    try:
        header = header_thinking(headers.get("X-Thinking"))
    except ValueError as exc:
        return Refusal(str(exc), "X-Thinking")
    decision = policy.decide(api.view(body, headers), api.client_thinking(body), header)
    mode: Mode = (header_mode or decision.mode
                  or (override.mode if override and override.mode else cfg.mode))
    model_budget = (decision.thinking_token_budget if decision.thinking_token_budget
                    is not None else override.thinking_token_budget if override else None)
    try:
        budget = resolve_thinking_budget(
            cfg.detectors.thinking_token_budget, model_budget, api.thinking_budget(body),
            headers.get("X-Thinking-Budget"))
    except ValueError as exc:
        return Refusal(str(exc), "thinking_token_budget")
    seconds_budget = (override.thinking_seconds_budget if override and
                      override.thinking_seconds_budget is not None
                      else cfg.detectors.thinking_seconds_budget)
    detectors = cfg.detectors
    if override is not None and override.detectors:
        detectors = replace(detectors, **override.detectors)
    if (detectors.thinking_token_budget != budget
            or detectors.thinking_seconds_budget != seconds_budget):
        detectors = replace(detectors, thinking_token_budget=budget,
                            thinking_seconds_budget=seconds_budget)
    adaptive = budget is None and cfg.policy.adaptive_budget and decision.thinking != "off"
    return Plan(mode, detectors, decision, f"{model_label}|{decision.rule or '-'}", adaptive)
