"""The sidecar's closed vocabularies, each declared once: modes, routes, outcomes, ladder
steps, upstream error kinds and the other :data:`~typing.Literal` types that config,
metrics, logs and the request core share.

Metric label sets are bounded by these types (mypy checks every call site); the tuples
beside some of them are the same sets as values, for validation and iteration.
"""

from __future__ import annotations

from typing import Literal, get_args

from detectors.agent_loops import LoopKind
from detectors.base import Channel

__all__ = [
    "AGENT_LOOP_MODES",
    "DIALECT_NAMES",
    "MODES",
    "AgentLoopAction",
    "AgentLoopMode",
    "BodyLayout",
    "Channel",
    "DialectChoice",
    "DialectName",
    "LadderStep",
    "LogFormat",
    "LoopKind",
    "Mode",
    "Outcome",
    "RecordDrop",
    "RecordKind",
    "ReissueOutcome",
    "ReloadResult",
    "Route",
    "Thinking",
    "UpstreamErrorKind",
    "UpstreamPoolName",
    "WatchMode",
    "WatchedRoute",
]

Mode = Literal["enforce", "cut", "shadow", "off"]
"""What the sidecar does on a verdict: ``enforce`` cuts and reissues, ``cut`` ends the
response cleanly, ``shadow`` only logs and counts, ``off`` does not watch at all."""
MODES: tuple[Mode, ...] = get_args(Mode)

AgentLoopMode = Literal["off", "shadow", "nudge", "refuse"]
"""What the sidecar does with an agent loop a request's history shows (docs/agent-loops.md):
``off`` does not look, ``shadow`` logs and counts, ``nudge`` adds one note for the model,
``refuse`` answers with a 400 the agent shows its user."""
AGENT_LOOP_MODES: tuple[AgentLoopMode, ...] = get_args(AgentLoopMode)

AgentLoopAction = Literal["shadow", "nudge", "refuse", "passed"]
"""What was done with one request that carried an agent loop (the ``action`` label):
``passed`` is a ``nudge`` or ``refuse`` request that went upstream as it came (its loop
was nudged before, or the note is already there, or the user spoke after the loop)."""

WatchMode = Literal["enforce", "cut", "shadow"]
"""The modes in which a stream is watched (the ``mode`` label of the runaway counter)."""

DialectName = Literal["vllm", "llamacpp", "sglang", "ollama"]
"""The upstream servers the sidecar knows (``sidecar.dialects``)."""
DIALECT_NAMES: tuple[DialectName, ...] = get_args(DialectName)
DialectChoice = Literal[DialectName, "auto"]
"""A dialect, or ``auto``: probe the upstream once at start-up."""

WatchedRoute = Literal["chat", "completions", "messages", "responses"]
"""The route label of a watched request: its API's family of requests. ``chat`` is
``POST /v1/chat/completions`` and Ollama's ``POST /api/chat``; ``completions`` is
``POST /v1/completions`` and Ollama's ``POST /api/generate``; ``messages`` is Anthropic's
``POST /v1/messages`` (Claude Code); ``responses`` is OpenAI's ``POST /v1/responses``
(Codex, the Agents SDK)."""
Route = Literal[WatchedRoute, "passthrough"]
"""The ``route`` label of request metrics: a watched route, or ``passthrough`` for every
other method and path."""

Outcome = Literal[
    "ok",  # answered without any runaway detected (or pass-through relayed)
    "shadow",  # a runaway was detected in shadow mode; the response was left unchanged
    "reissued",  # cut, and a reissue's answer was spliced in
    "cut",  # cut in ``cut`` mode: ended cleanly without a reissue
    "exhausted",  # every ladder step ran away too; ended with finish_reason "length"
    "client_disconnect",  # the client went away before the response ended
    "upstream_error",  # the upstream failed and the client got an error
    "rejected",  # refused by the sidecar itself (body too large, API key, draining)
    "error",  # a sidecar bug: the client got a 500 or an in-stream error
]
"""How a client request ended."""

LadderStep = Literal["thinking_off", "fallback_model", "salvage"]
"""The kind of a reissue (the ``step`` label): ``no-think``, ``fallback:MODEL`` or
``salvage`` in ``reissue.ladder``."""

ReissueOutcome = Literal[
    "ok",  # the reissue answered; its content went to the client
    "runaway",  # it ran away too; the next ladder step runs (or the ladder is exhausted)
    "rejected",  # the upstream refused the reissued body (4xx): the thinking-off rule is wrong
    "upstream_error",  # connect error, timeout, reset or 5xx during the reissue
    "client_disconnect",  # the client went away during the reissue
    "error",  # a sidecar bug
]
"""How one reissue ended."""

UpstreamErrorKind = Literal["connect", "timeout", "reset", "status_5xx", "protocol", "other"]
"""``connect``: refused or unreachable; ``timeout``: connect or read timeout; ``reset``:
connection closed early, before or during the body; ``status_5xx``: the upstream answered
5xx; ``protocol``: invalid SSE or JSON from the upstream."""

UpstreamPoolName = Literal["watched", "passthrough"]
"""Which of the sidecar's two upstream clients (the ``pool`` label): ``watched`` is the
watched routes' own pool (``sidecar.net.upstream``), ``passthrough`` aiohttp's client for
every other route."""

RecordKind = Literal["detection", "budget", "healthy"]
"""What a recorded trace is (``sidecar.traces``): ``detection`` (a text detector fired;
every one is kept), ``budget`` (a thinking budget or the stall timer fired) or ``healthy``
(no detector fired); the last two are sampled per model and hour."""

RecordDrop = Literal["queue_full", "too_large", "write_error"]
"""Why a record was not written: the writer's queue was full, it was larger than a trace
file may be (a long prompt kept with it), or the disk refused it."""

ReloadResult = Literal["ok", "error"]
"""Whether a SIGHUP reload took effect."""

Thinking = Literal["on", "off"]
"""A thinking decision of the policy, or what the client asked for."""

LogFormat = Literal["json", "console"]
"""How log lines are written."""

BodyLayout = Literal["vllm", "llamacpp"]
"""Whose non-streaming chat or completions body a watched answer is rebuilt in: the
server's own (``sidecar.dialects.Dialect.body_layout``)."""
