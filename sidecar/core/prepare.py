"""The bodies of a watched request's upstream attempts, shaped step by step (pure).

The runner (``sidecar.net.runner``) reads the client's body and calls these steps in
order; it awaits the fleet (``sidecar.net.fleet``: the runaway memory, the adaptive
budgets) only between them:

1. :func:`read` parses the body and decides whether it can be watched at all; it names
   the runaway-memory keys of the reasoning the request's history carries back
   (``Read.recall``), for the runner to look up;
2. :func:`clean` takes the keys the memory knows as cut and replaces that reasoning
   (``WireApi.clean_history``): a looped block fed back could start the loop again;
3. :func:`shape` plans the request (``sidecar.core.plan``: mode, policy, budgets) and
   shapes the body the upstream gets: thinking off when the policy says so, and the
   reasoning a client hides asked for anyway (the sidecar must watch it). When the plan
   asks for the adaptive budget (``Plan.adaptive``) the runner fetches it next;
4. :func:`ready` keeps what the exchange needs while its stream is open: the request's
   bytes and facts and the first attempt's body, not the parsed body (a coding agent's
   prompt is tens of kilobytes).

A request may turn out not to be the sidecar's to judge (:class:`Pass`: relayed as it
came; vLLM answers a malformed request with its own 400), or to carry a malformed
control (:class:`~sidecar.core.plan.Refusal`: a 400 naming it).

Then the attempts: :func:`recalls_memory` says whether the runaway memory is asked about
the prompt, and on a hit the first attempt sends :func:`memory_body` (thinking off);
after a cut, each ladder step sends :func:`reissue_body`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from detectors import Verdict
from sidecar.config import Config, ThinkingOffRule
from sidecar.core.attempt import Attempt
from sidecar.core.bodies import useful_reasoning
from sidecar.core.exchange import watchable
from sidecar.core.plan import Plan, Refusal, plan
from sidecar.core.wire import RequestFacts, WireApi
from sidecar.dialects import Dialect
from sidecar.labels import Mode
from sidecar.policy.rules import Policy

#: Runaway-memory keys of the marks of cut reasoning (``Splicer.marks``), apart from the
#: prompt fingerprints.
CUT_PREFIX = "cut:"


@dataclass(frozen=True, slots=True)
class Pass:
    """Not watched: the request goes upstream as ``raw``, and its answer to the client as
    it comes."""

    raw: bytes


@dataclass(frozen=True, slots=True)
class Read:
    """A request that can be watched: its parsed body and its bytes."""

    body: dict[str, Any]
    raw: bytes
    #: The runaway-memory keys (:data:`CUT_PREFIX` and a mark) of the reasoning its
    #: history carries back: the runner asks the memory which of them were cut.
    recall: list[str]


@dataclass(frozen=True, slots=True)
class Shaped:
    """A planned request and the body the upstream gets (before the first attempt's own
    changes, ``WireApi.first_body``)."""

    body: dict[str, Any]
    #: ``body``'s bytes: every reissue body is made from them.
    raw: bytes
    facts: RequestFacts
    plan: Plan
    model: str | None
    max_tokens: int | None


@dataclass(frozen=True, slots=True)
class Prepared:
    """What a watched exchange keeps of its request while the stream is open."""

    #: The request as the upstream gets it: every reissue body is made from it.
    raw: bytes
    #: The first attempt's body (``raw`` itself when the two are the same).
    first: bytes
    facts: RequestFacts
    plan: Plan
    model: str | None
    max_tokens: int | None


def model_of(body: Mapping[str, Any]) -> str | None:
    """The request's ``model``, if it names one."""
    model = body.get("model")
    return model if isinstance(model, str) else None


def read(api: WireApi, raw: bytes) -> Read | Pass:
    """Step 1: parse ``raw``; :class:`Pass` when it is no JSON object ``api`` can watch
    (see :func:`~sidecar.core.exchange.watchable` and ``WireApi.watchable``)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return Pass(raw)
    if not isinstance(body, dict) or not watchable(raw, body) or not api.watchable(body):
        return Pass(raw)
    return Read(body, raw, [CUT_PREFIX + mark for mark in api.history_marks(body)])


def clean(api: WireApi, got: Read, cut: Collection[str]) -> Read:
    """Step 2: ``got`` with the reasoning of the keys in ``cut`` (those of ``got.recall``
    the runaway memory knows) replaced by ``CUT_NOTE``; ``got`` itself when none was."""
    if not cut:
        return got
    body = api.clean_history(got.body, {key.removeprefix(CUT_PREFIX) for key in cut})
    return Read(body, orjson.dumps(body), [])


def shape(cfg: Config, api: WireApi, dialect: Dialect, got: Read, headers: Mapping[str, str],
          policy: Policy, model_label: Callable[[str | None], str]) -> Shaped | Refusal | Pass:
    """Step 3: plan ``got`` under ``cfg`` and ``policy`` (``model_label``: the model's
    metric label, part of the adaptive budget's key) and shape its body; :class:`Pass` in
    mode ``off``."""
    body, raw = got.body, got.raw
    model = model_of(body)
    planned = plan(cfg, api, body, headers, policy, model_label(model))
    if isinstance(planned, Refusal):
        return planned
    if planned.mode == "off":
        return Pass(raw)
    decision = planned.decision
    facts = api.facts(body)
    if (decision.thinking == "off" and decision.source != "client"
            and not facts.thinking_disabled):
        body = api.thinking_off(body, api.off_rules(cfg, dialect))
        raw = orjson.dumps(body)
        facts = api.facts(body)
    # The facts stay those of the client's choice: a reasoning it hides is exposed to be
    # watched (the tokens are generated anyway), and hidden again from what it gets.
    exposed = api.expose_reasoning(body)
    if exposed is not None:
        body = exposed
        raw = orjson.dumps(body)
    return Shaped(body, raw, facts, planned, model, api.max_tokens(body))


def ready(api: WireApi, shaped: Shaped, planned: Plan) -> Prepared:
    """Step 4: what the exchange of ``shaped`` keeps, running under ``planned`` (the plan
    with its adaptive budget, if any)."""
    first = api.first_body(shaped.body, shaped.facts)
    return Prepared(shaped.raw, shaped.raw if first is None else orjson.dumps(first),
                    shaped.facts, planned, shaped.model, shaped.max_tokens)


def recalls_memory(cfg: Config, mode: Mode, facts: RequestFacts) -> bool:
    """Whether the runaway memory is asked about the prompt before the first attempt: a
    prompt that ran away recently goes straight to thinking off (``enforce`` only, and
    only when the client left thinking on)."""
    return cfg.memory.enabled and mode == "enforce" and not facts.thinking_disabled


def memory_body(api: WireApi, raw: bytes, facts: RequestFacts,
                rules: Sequence[ThinkingOffRule]) -> bytes:
    """The first attempt's body when the runaway memory knows the prompt: the ``no-think``
    step's, for every choice."""
    return orjson.dumps(api.reissue_body(orjson.loads(raw), "no-think", facts, rules=rules,
                                         open_choices=facts.choices))


def reissue_body(api: WireApi, raw: bytes, step: str, facts: RequestFacts, *,
                 rules: Sequence[ThinkingOffRule], open_choices: int, attempt: Attempt,
                 verdict: Verdict) -> bytes:
    """The body of ladder step ``step`` after ``attempt`` was cut for ``verdict``, for the
    ``open_choices`` choices still open; ``salvage`` continues from the reasoning before
    the loop began."""
    reasoning = ""
    if step == "salvage":
        index = attempt.verdict_index if attempt.verdict_index is not None else 0
        reasoning = useful_reasoning(attempt.reasoning_of(index), verdict.evidence.excerpt)
    return orjson.dumps(api.reissue_body(orjson.loads(raw), step, facts, rules=rules,
                                         open_choices=open_choices, reasoning=reasoning))
