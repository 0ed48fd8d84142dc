"""Thinking policy: decide per request, before the first token, whether the model thinks (pure).

Rules from config are evaluated in order; the first whose every condition holds decides.
A rule can match on the model name, the route, request headers, the system prompt or the
last user message (a regex, or features such as "contains a code block" or "mentions a
stack trace"), whether tools are present, and ``max_tokens``. Its actions set thinking on
or off, set a thinking-token budget, or set the mode. Each decision carries the rule name
and a one-line explanation, which the proxy logs once per request and counts by rule.

Precedence for thinking, highest first: what the client set in the body (each wire API
reads its own switches: ``chat_template_kwargs.enable_thinking``/``thinking`` and
``reasoning_effort`` on OpenAI's APIs, ``think`` on Ollama's), the
``X-Thinking: on|off|auto`` header (``auto`` defers to the rules), the first matching
rule, the default (leave the request alone). The policy never overrides the client.

Presets, enabled only when listed in ``policy.presets``:

- ``coding-no-think``: a code block, a stack trace or tools in the request: thinking off
  (field measurements: equal or better coding answers, 4-7x faster, and most runaways).
- ``math-think``: equations or maths vocabulary: thinking on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sidecar.config import PolicyRule
from sidecar.labels import Mode, Thinking, WatchedRoute

_FEATURES: dict[str, re.Pattern[str]] = {
    "code_block": re.compile(r"```|^(?: {4}|\t)\S", re.MULTILINE),
    "stack_trace": re.compile(
        r"Traceback \(most recent call last\)|^\s+at [\w.$]+\(.*\)$|"
        r"\b\w+(?:Error|Exception): |panicked at|Segmentation fault|\bline \d+, in\b",
        re.MULTILINE),
    "math": re.compile(
        r"\\frac|\\sum|\\int|\$[^$]+\$|\b(?:prove|integral|derivative|equation|theorem|"
        r"probability|solve for)\b|\d\s*[-+*/^=]\s*\d", re.IGNORECASE),
}


# A preset may stand for several rules: a code block or stack trace is one condition,
# tools in the request another.
PRESETS: dict[str, tuple[PolicyRule, ...]] = {
    "coding-no-think": (
        PolicyRule(name="coding-no-think", features=("code_block", "stack_trace"),
                   thinking="off"),
        PolicyRule(name="coding-no-think", tools=True, thinking="off"),
    ),
    "math-think": (PolicyRule(name="math-think", features=("math",), thinking="on"),),
}


def rules_of(rules: Sequence[PolicyRule], presets: Sequence[str]) -> list[PolicyRule]:
    """The configured rules, then the enabled presets' rules, in order."""
    return [*rules, *(rule for name in presets for rule in PRESETS[name])]


@dataclass(frozen=True, slots=True)
class Decision:
    """What the policy decided for one request, and why."""

    rule: str | None
    thinking: Thinking | None
    thinking_token_budget: int | None
    mode: Mode | None
    source: Literal["client", "header", "rule", "default"]
    reason: str


@dataclass(frozen=True, slots=True)
class RequestView:
    """The parts of a request the rules can look at (built once per request)."""

    model: str
    route: WatchedRoute
    headers: Mapping[str, str]
    system: str
    last_user: str
    tools: bool
    max_tokens: int | None

    @classmethod
    def of(cls, body: Mapping[str, Any], route: WatchedRoute,
           headers: Mapping[str, str], max_tokens: int | None) -> RequestView:
        """Extract the view from a parsed request body."""
        model = body.get("model") if isinstance(body.get("model"), str) else ""
        system, last_user = "", ""
        messages = body.get("messages")
        if isinstance(messages, list):
            for message in messages:
                if not isinstance(message, Mapping):
                    continue
                text = _text(message.get("content"))
                if message.get("role") in ("system", "developer"):
                    system = text
                elif message.get("role") == "user":
                    last_user = text
        elif isinstance(body.get("prompt"), str):
            last_user = body["prompt"]
        tools = body.get("tools")
        return cls(str(model), route, headers, system, last_user,
                   isinstance(tools, list) and bool(tools), max_tokens)


def header_thinking(value: str | None) -> Thinking | Literal["auto"] | None:
    """Parse ``X-Thinking``; raises ``ValueError`` for anything but on, off or auto."""
    if value is None:
        return None
    v = value.strip().lower()
    if v in ("on", "off", "auto"):
        return v  # type: ignore[return-value]
    raise ValueError("X-Thinking must be one of on, off, auto")


class Policy:
    """The ordered rules of one config; compiled once."""

    __slots__ = ("_compiled", "rules")

    def __init__(self, rules: Sequence[PolicyRule]) -> None:
        self.rules = tuple(rules)
        self._compiled = [_compile(rule) for rule in self.rules]

    def decide(self, view: RequestView, client: Thinking | None,
               header: Thinking | Literal["auto"] | None) -> Decision:
        """The decision for one request (see the module docstring for precedence);
        ``client`` is what the client asked of thinking in the body (its API reads it)."""
        rule = next((r for r, test in zip(self.rules, self._compiled, strict=True)
                     if test(view)), None)
        budget = rule.thinking_token_budget if rule else None
        mode = rule.mode if rule else None
        name = rule.name if rule else None
        if client is not None:
            return Decision(name, client, budget, mode, "client",
                            f"the client set thinking {client} in the request body")
        if header in ("on", "off"):
            return Decision(name, header, budget, mode, "header", f"X-Thinking: {header}")
        if rule is not None:
            return Decision(name, rule.thinking, budget, mode, "rule",
                            f"rule {rule.name!r} matched")
        return Decision(None, None, None, None, "default", "no rule matched")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multi-part content: keep the text parts
        return "\n".join(p.get("text", "") for p in content
                         if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    return ""


def _compile(rule: PolicyRule) -> Any:
    model = re.compile(rule.model, re.IGNORECASE) if rule.model else None
    system = re.compile(rule.system) if rule.system else None
    last_user = re.compile(rule.last_user) if rule.last_user else None
    headers = {k.lower(): re.compile(v) for k, v in (rule.headers or {}).items()}
    features = [_FEATURES[f] for f in rule.features]

    def test(view: RequestView) -> bool:
        if model is not None and not model.search(view.model):
            return False
        if rule.route is not None and rule.route != view.route:
            return False
        for name, pattern in headers.items():
            value = view.headers.get(name)
            if value is None or not pattern.search(value):
                return False
        if system is not None and not system.search(view.system):
            return False
        if last_user is not None and not last_user.search(view.last_user):
            return False
        if features and not any(f.search(view.last_user) for f in features):
            return False
        if rule.tools is not None and rule.tools != view.tools:
            return False
        mt = view.max_tokens
        if rule.max_tokens_at_least is not None and (mt is None or mt < rule.max_tokens_at_least):
            return False
        return not (rule.max_tokens_at_most is not None and (
            mt is None or mt > rule.max_tokens_at_most))

    return test
