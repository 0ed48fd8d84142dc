"""What the I/O layer counts and logs: the metrics (``sidecar.obs.metrics``) and the log
lines (``sidecar.obs.logs``) of the watched exchanges and the pass-through requests.

Each function books one moment of a request, so the runner and the relay say *when*
and this module says *what*: an attempt ended (:func:`attempt_ended`), the ladder decided
what follows (:func:`counted`, which books a verdict with :func:`verdict`), the
request's policy (:func:`policy`), cleaned history (:func:`history_cleaned`) and agent
loop (:func:`agent_loop`), and once
per request its end: the ``access`` line (:func:`exchange_done`,
:func:`passthrough_done`).
"""

from __future__ import annotations

import asyncio

import structlog
from aiohttp import web

from detectors import Verdict
from sidecar.core.agent_loops import Found
from sidecar.core.attempt import Attempt
from sidecar.core.exchange import Exchange
from sidecar.core.ladder import Next
from sidecar.labels import LadderStep, Outcome, ReissueOutcome, WatchedRoute
from sidecar.net.sinks import Sink
from sidecar.obs.logs import access_log_fields, agent_loop_log_fields, runaway_log_fields
from sidecar.obs.metrics import Metrics
from sidecar.policy.rules import Decision

log = structlog.get_logger("runaway_sidecar")


def policy(metrics: Metrics, ex: Exchange, decision: Decision) -> None:
    """The thinking policy decided for this request (nothing to book by default)."""
    if decision.source == "default":
        return
    if decision.rule is not None:
        metrics.policy_decision(decision.rule)
    log.info("policy", request_id=ex.request_id, model=ex.model, rule=decision.rule,
             source=decision.source, thinking=decision.thinking, reason=decision.reason)


def history_cleaned(metrics: Metrics, request: web.Request, request_id: str,
                    route: WatchedRoute, pieces: int) -> None:
    """``pieces`` of cut reasoning were replaced in the history of the request
    ``request_id`` (the id its exchange and ``access`` line will carry)."""
    metrics.history_cleaned(route, pieces)
    log.info("history_cleaned", path=request.path, pieces=pieces, request_id=request_id)


def agent_loop(metrics: Metrics, request_id: str, route: WatchedRoute,
               model: str | None, found: Found, *, arguments: bool) -> None:
    """The history of the request ``request_id`` (the id its exchange and ``access``
    line will carry) showed an agent loop (``found``: the evidence and what was done);
    ``arguments``: log the calls' arguments too."""
    finding = found.finding
    metrics.agent_loop(route, model, finding.kind, found.action)
    log.warning("agent_loop", **agent_loop_log_fields(
        finding, action=found.action, reason=found.reason, route=route, model=model,
        request_id=request_id, arguments=arguments))


def attempt_ended(metrics: Metrics, ex: Exchange, attempt: Attempt) -> None:
    """An attempt's stream ended: its tokens, and the exchange's first content."""
    ex.thinking_tokens += attempt.thinking_tokens
    ex.content_tokens += attempt.content_tokens
    if attempt.first_content_at is not None and not ex.ttfc_seen:
        ex.ttfc_seen = True
        metrics.observe_ttfc(ex.model, attempt.first_content_at - ex.started)


def counted(metrics: Metrics, ex: Exchange, nxt: Next, attempt: Attempt | None = None) -> None:
    """What the ladder's ``nxt`` says to count after ``attempt`` (None: the attempt did not
    end in a stream): its verdict, the exchange's outcome, how a reissue went, an upstream
    error."""
    if nxt.record_verdict:
        assert attempt is not None
        assert attempt.verdict is not None
        verdict(metrics, ex, attempt, attempt.verdict)
    if nxt.outcome is not None:
        ex.outcome = nxt.outcome
    reissue_done(metrics, ex, nxt.reissue)
    if nxt.upstream_error is not None:
        metrics.upstream_error(nxt.upstream_error)


def verdict(metrics: Metrics, ex: Exchange, attempt: Attempt, found: Verdict) -> None:
    """A detector fired: count it, what the cut wasted and saved, and log the ``runaway``
    line."""
    ex.verdicts.append(found)
    mode = ex.mode if ex.mode in ("enforce", "cut", "shadow") else "enforce"
    metrics.runaway(ex.model, found.detector, found.channel, mode)
    metrics.detection_point(found.detector, found.at_token)
    if attempt.stopped:
        metrics.wasted_tokens(ex.model, attempt.counted_tokens)
        if ex.max_tokens is not None:
            metrics.saved_tokens(ex.model, ex.max_tokens - attempt.counted_tokens)
    loop = asyncio.get_running_loop()
    log.warning("runaway", **runaway_log_fields(
        found, request_id=ex.request_id, model=ex.model,
        seconds=loop.time() - ex.started, mode=ex.mode, attempt=attempt.number))


def reissue_done(metrics: Metrics, ex: Exchange,
                 reissue: tuple[LadderStep, ReissueOutcome] | None) -> None:
    """Count how a reissue went (``None``: the attempt was the first, not a reissue)."""
    if reissue is not None:
        metrics.reissue(ex.model, *reissue)


def exchange_done(metrics: Metrics, request: web.Request, ex: Exchange, sink: Sink) -> None:
    """A watched exchange is over, however it ended: its counters and ``access`` line."""
    seconds = asyncio.get_running_loop().time() - ex.started
    metrics.request_done(ex.api.route, ex.outcome, ex.model)
    metrics.observe_thinking(ex.model, ex.thinking_tokens,
                             seconds if ex.thinking_tokens else 0.0)
    metrics.content_tokens(ex.model, ex.content_tokens)
    log.info("access", **access_log_fields(
        method=request.method, path=request.path, status=sink.status, route=ex.api.route,
        outcome=ex.outcome, model=ex.model, request_id=ex.request_id, duration_s=seconds,
        bytes_sent=sink.bytes_sent, upstream_status=ex.upstream_status))


def passthrough_done(metrics: Metrics, request: web.Request, *, outcome: Outcome,
                     status: int, upstream_status: int | None, bytes_sent: int,
                     seconds: float) -> None:
    """A pass-through request is over: its counter and ``access`` line."""
    metrics.request_done("passthrough", outcome)
    log.info("access", **access_log_fields(
        method=request.method, path=request.path, status=status, route="passthrough",
        outcome=outcome, model=None, request_id=request.headers.get("X-Request-Id", ""),
        duration_s=seconds, bytes_sent=bytes_sent, upstream_status=upstream_status))
