"""The exchange runner: one watched request, from the client's body to the response's
last byte.

:meth:`Runner.watched` is a watched route's handler. It

1. reads the client's body (``sidecar.net.client``) and prepares the request with the
   pure steps of :mod:`sidecar.core.prepare`, awaiting the fleet between them: the cut
   reasoning its history carries back, the agent loop it shows
   (``sidecar.core.agent_loops``), the adaptive budget (:meth:`Runner._prepare`). A
   request that cannot be watched is relayed (``sidecar.net.relay``), a malformed control
   or a refused agent loop answered with a 400;
2. opens the exchange: its books (``Exchange``), its API-side parts (``WireApi.open``:
   splicer, fold, attempts), its sink and its ladder (:meth:`Runner._open`);
3. runs its attempts (:meth:`_Run.serve`): the runaway memory may make the first one
   thinking-off; each attempt is pumped (``sidecar.net.pump``) and settled, and the
   ladder (``sidecar.core.ladder``) says what follows: done, relay, fail, reissue or end;
4. ends it, however it went: a bug of the sidecar's or the client's disconnect is
   settled here, and the exchange is counted and logged once
   (``sidecar.net.accounting``).

Where what comes next plugs in:

- a check of the request as a whole before any upstream attempt goes in
  :meth:`Runner._prepare` right after ``prepare.shape``, as the agent-loop check
  (``sidecar.core.agent_loops``) does: ``Shaped.body`` is the parsed body the upstream is
  to get; the check may return a changed ``Shaped`` (a note added to the body) or a
  ``Refusal``, which is answered like a malformed control;
- what an exchange leaves behind: :meth:`_Run.settle` sees each attempt as it ends (its
  verdict, ``Attempt.reasoning_of``; the trace recorder takes it there), and
  :meth:`_Run.finish` runs once at the end of every exchange, with its books
  (``Exchange.verdicts``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Protocol

import structlog
from aiohttp import web

from detectors import DetectorConfig, Verdict
from sidecar.config import Config, ThinkingOffRule
from sidecar.core import agent_loops, prepare
from sidecar.core.attempt import Attempt, AttemptSpec, Totals
from sidecar.core.bodies import prompt_estimate
from sidecar.core.exchange import Exchange
from sidecar.core.ladder import Ended, Ladder, Next
from sidecar.core.plan import Refusal
from sidecar.core.wire import Opened, WireApi
from sidecar.dialects import Dialect
from sidecar.errors import ClientBodyTimeout, RequestTooLarge, UpstreamError
from sidecar.net import accounting
from sidecar.net.client import (
    RESETS,
    body_timeout_response,
    in_stream_error,
    json_error,
    read_body,
    reset_by_client,
)
from sidecar.net.fleet import Fleet
from sidecar.net.pump import NotStreamed, pump
from sidecar.net.relay import Relay
from sidecar.net.sinks import BodySink, Sink, StreamSink
from sidecar.net.upstream import UpstreamPool
from sidecar.obs.metrics import Metrics
from sidecar.policy.rules import Policy
from sidecar.traces.recorder import Recorder

log = structlog.get_logger("runaway_sidecar")


class _InternalError(UpstreamError):
    """What the client sees when the sidecar itself failed."""

    status = 500
    error_type = "InternalServerError"


class Settings(Protocol):
    """What an exchange runs under, read once when it starts: a reload applies to the
    exchanges that start after it (the ``Proxy`` holds these)."""

    config: Config
    policy: Policy
    dialect: Dialect


class Runner:
    """Runs the watched exchanges of one upstream: what they share (the settings, the
    upstream pool, the fleet, the relay and the metrics)."""

    def __init__(self, settings: Settings, pool: UpstreamPool, fleet: Fleet, relay: Relay,
                 metrics: Metrics, recorder: Recorder | None = None) -> None:
        self.settings, self.pool, self.fleet = settings, pool, fleet
        self.relay, self.metrics = relay, metrics
        #: The trace recorder (``[record]``), None when nothing is recorded.
        self.recorder = recorder

    async def watched(self, request: web.Request, *, api: WireApi) -> web.StreamResponse:
        """The handler of ``api``'s route (see the module docstring)."""
        run = await self._prepare(request, api)
        if isinstance(run, web.StreamResponse):
            return run
        self.metrics.stream_started()
        try:
            try:
                await run.serve()
            except RESETS as exc:
                if not reset_by_client(exc, request):
                    raise
                raise asyncio.CancelledError from None  # the client went away mid-write
            except Exception:
                # A bug of ours must not leave the client with a broken stream.
                log.exception("internal_error", request_id=run.ex.request_id)
                await run.crashed()
            return await run.sink.finish(run.ex)
        except asyncio.CancelledError:
            run.disconnected()
            raise
        finally:
            self.metrics.stream_ended()
            run.finish()

    async def _prepare(self, request: web.Request, api: WireApi) -> _Run | web.StreamResponse:
        """Read and prepare the request (one snapshot of the settings for the whole
        exchange); the response itself when it is relayed or refused."""
        settings = self.settings
        cfg, policy, dialect = settings.config, settings.policy, settings.dialect
        # Drawn once, so the lines logged before the exchange opens name it too.
        request_id = request.headers.get("X-Request-Id") or uuid.uuid4().hex
        if api.ollama_native and not dialect.native_ndjson:
            return await self.relay.relay(request, cfg)  # "auto" found another server
        try:
            got = prepare.read(api, await read_body(request, cfg))
        except RequestTooLarge:
            self.metrics.request_done(api.route, "rejected")
            return json_error(api, 413, f"request body exceeds {cfg.max_body_bytes} bytes",
                              "RequestTooLargeError")
        except ClientBodyTimeout:
            self.metrics.request_done(api.route, "rejected")
            return body_timeout_response(api)
        if isinstance(got, prepare.Pass):
            return await self.relay.relay(request, cfg, got.raw)
        if got.recall:
            cut = await self.fleet.recalled(got.recall, asyncio.get_running_loop().time())
            if cut:
                got = prepare.clean(api, got, cut)
                accounting.history_cleaned(self.metrics, request, request_id, api.route,
                                           len(cut))
        shaped = prepare.shape(cfg, api, dialect, got, request.headers, policy,
                               self.metrics.model_label)
        if isinstance(shaped, prepare.Pass):
            return await self.relay.relay(request, cfg, shaped.raw)
        if isinstance(shaped, Refusal):
            self.metrics.request_done(api.route, "rejected", prepare.model_of(got.body))
            return json_error(api, 400, shaped.message, "BadRequestError", param=shaped.param)
        checked = agent_loops.check(cfg, api, shaped, request.headers)
        if checked.found is not None:
            accounting.agent_loop(self.metrics, request_id, api.route, shaped.model,
                                  checked.found, arguments=cfg.agent_loops_log_arguments)
        if checked.refusal is not None:
            self.metrics.request_done(api.route, "rejected", shaped.model)
            return json_error(api, 400, checked.refusal.message, "BadRequestError",
                              param=checked.refusal.param)
        shaped = checked.shaped
        planned = shaped.plan
        if planned.adaptive:
            planned = planned.with_token_budget(await self.fleet.budget(planned.budget_key))
        return self._open(request, request_id, api, cfg, dialect,
                          prepare.ready(api, shaped, planned))

    def _open(self, request: web.Request, request_id: str, api: WireApi, cfg: Config,
              dialect: Dialect, ready: prepare.Prepared) -> _Run:
        """Open the exchange of a prepared request: its books, parts, sink and ladder."""
        planned, facts = ready.plan, ready.facts
        ex = Exchange(api=api, config=cfg, model=ready.model, mode=planned.mode,
                      request_id=request_id,
                      started=asyncio.get_running_loop().time(), facts=facts,
                      max_tokens=ready.max_tokens, budget_key=planned.budget_key)
        accounting.policy(self.metrics, ex, planned.decision)
        opened = api.open(facts, dialect, request_id=ex.request_id, model=ex.model)
        sink: Sink = (StreamSink(api, request) if opened.fold is None
                      else BodySink(api, opened.fold))
        ladder = Ladder(cfg.reissue.ladder, max_attempts=cfg.reissue.max_attempts,
                        mode=ex.mode, choices=facts.choices, salvageable=facts.salvageable)
        return _Run(self, request, ex, opened, sink, ladder, ready,
                    api.off_rules(cfg, dialect))


class _Run:
    """One exchange in progress. It keeps the request as its bytes (``raw``, which every
    reissue body is made from) and the current attempt's body (``body``), not parsed: a
    reissue parses the bytes again."""

    __slots__ = ("body", "detectors", "ex", "fleet", "ladder", "metrics", "opened", "pool",
                 "raw", "record_chars", "recorder", "request", "rules", "sink")

    def __init__(self, runner: Runner, request: web.Request, ex: Exchange, opened: Opened,
                 sink: Sink, ladder: Ladder, ready: prepare.Prepared,
                 rules: Sequence[ThinkingOffRule]) -> None:
        self.pool, self.fleet, self.metrics = runner.pool, runner.fleet, runner.metrics
        self.request, self.ex, self.opened, self.sink, self.ladder = (
            request, ex, opened, sink, ladder)
        self.raw, self.body = ready.raw, ready.first
        self.detectors: DetectorConfig = ready.plan.detectors
        self.rules = rules
        # What the recorder keeps of each attempt's reasoning (0: it records nothing).
        self.recorder = runner.recorder
        self.record_chars = 0 if self.recorder is None else self.recorder.keep_chars(ex.mode)

    async def serve(self) -> None:
        """Run the first attempt, and after a cut the reissue ladder, until it says the
        exchange is over."""
        ex = self.ex
        loop = asyncio.get_running_loop()
        if (prepare.recalls_memory(ex.config, ex.mode, ex.facts)
                and await self.fleet.recalls(ex.facts.fingerprint, loop.time())):
            self.body = prepare.memory_body(ex.api, self.raw, ex.facts, self.rules)
            log.info("runaway_memory_hit", request_id=ex.request_id, model=ex.model)
        # An attempt cut before the upstream's usage is billed the prompt's estimate
        # until one reports the real size.
        earlier = Totals(last_prompt=prompt_estimate(self.raw))
        index_map: Mapping[int, int] = {}
        while True:
            attempt = self._attempt(earlier, index_map)
            nxt = await self._pump(attempt)
            if nxt is None:
                return
            if nxt.kind == "done":
                await self._done(nxt, attempt)
                return
            verdict = attempt.verdict
            assert verdict is not None
            if nxt.remember:
                await self.fleet.remember(ex.facts.fingerprint, loop.time())
            earlier = attempt.totals()
            if nxt.kind == "end":
                await self._end(nxt, attempt, verdict, earlier)
                return
            index_map = await self._reissue(nxt, attempt, verdict)

    def _attempt(self, earlier: Totals, index_map: Mapping[int, int]) -> Attempt:
        """Start the next attempt (``earlier``: the tokens of those before it;
        ``index_map``: its choices' indices on the client's side)."""
        ex, ladder = self.ex, self.ladder
        number = ladder.started()
        ex.attempts += 1
        return self.opened.attempt(AttemptSpec(
            number=number, detectors=self.detectors,
            started_at=asyncio.get_running_loop().time(), exchange_started=ex.started,
            earlier=earlier, step=ladder.step, index_map=index_map,
            stop_on_verdict=ex.mode in ("enforce", "cut"),
            keep_reasoning=ex.mode == "enforce" and ladder.salvage_ahead,
            record_chars=self.record_chars))

    async def _pump(self, attempt: Attempt) -> Next | None:
        """Pump ``attempt`` and settle it; None when the exchange is over without a stream
        to go on from (the upstream failed, or answered with an error status)."""
        try:
            answer = await pump(self.pool, self.request, self.ex, attempt, self.body,
                                self.sink)
        except asyncio.CancelledError:
            if self.ex.delivered:
                # The client left once it had its response's end, before the upstream
                # ended the body: the exchange is counted as it ended.
                self.settle(attempt)
            raise
        except UpstreamError as err:
            await self._fail(self.ladder.after(Ended(failed=err.kind)), err)
            return None
        if answer is not None:
            await self._not_streamed(attempt.number, answer)
            return None
        return self.settle(attempt)

    async def _not_streamed(self, number: int, answer: NotStreamed) -> None:
        """The upstream answered attempt ``number`` with ``answer``, no stream: the first
        attempt's goes to the client as it came, a reissue's fails the exchange."""
        if number == 0:
            self.ex.upstream_status = answer.status
            await self.sink.relay(answer.status, answer.headers, answer.body)
        nxt = self.ladder.after(Ended(status=answer.status))
        if nxt.kind == "fail":
            await self._fail(nxt, UpstreamError(
                f"reissue failed with upstream status {answer.status}"))

    def settle(self, attempt: Attempt) -> Next:
        """Book an attempt whose stream ended (its tokens, its verdict, the exchange's
        outcome, how a reissue went) and return what the ladder says comes next."""
        accounting.attempt_ended(self.metrics, self.ex, attempt)
        nxt = self.ladder.after(Ended(runaway=attempt.verdict is not None,
                                      stream_error=attempt.error is not None,
                                      finished=attempt.finished_choices))
        accounting.counted(self.metrics, self.ex, nxt, attempt)
        if self.record_chars:
            assert self.recorder is not None
            self.recorder.ended(self.ex, attempt, self.raw)
        return nxt

    async def _done(self, nxt: Next, attempt: Attempt) -> None:
        """The response is complete as the last attempt left it: a non-streaming client
        gets an in-stream error as an error status; a healthy first attempt feeds the
        adaptive budget."""
        ex = self.ex
        if nxt.outcome == "upstream_error" and attempt.error is not None:
            if not ex.client_stream:
                # vLLM answers a non-streaming request that fails mid-generation with an
                # error status, not a 200 holding half a completion.
                await self.failed(in_stream_error(attempt.error.message, attempt.error.code))
        elif (attempt.verdict is None and attempt.number == 0
              and ex.config.policy.adaptive_budget and attempt.first_content_at is not None
              and ex.thinking_tokens > 0):
            await self.fleet.observe_thinking(ex.budget_key, ex.thinking_tokens)

    async def _end(self, nxt: Next, attempt: Attempt, verdict: Verdict, totals: Totals) -> None:
        """The ladder ends the response after the cut ``attempt``: every open choice ends
        as at the length limit, with the usage of every attempt (``totals``)."""
        ex = self.ex
        assert nxt.action is not None
        if nxt.exhausted:
            self.metrics.ladder_exhausted(ex.model)
        self.sink.cut(nxt.action)
        loop = asyncio.get_running_loop()
        await self.sink.write(self.opened.splicer.end(
            attempt, verdict, nxt.action, attempt.number, nxt.open_choices, totals,
            usage=ex.facts.usage, elapsed=loop.time() - ex.started, wall=time.time()))
        await self._remember_marks()

    async def _reissue(self, nxt: Next, attempt: Attempt, verdict: Verdict) -> dict[int, int]:
        """The cut ``attempt`` is followed by ladder step ``nxt.step``: make its body, tell
        the client; return the next attempt's client-side choice indices."""
        ex = self.ex
        assert nxt.step is not None
        self.body = prepare.reissue_body(
            ex.api, self.raw, nxt.step, ex.facts, rules=self.rules,
            open_choices=len(nxt.open_choices), attempt=attempt, verdict=verdict)
        self.sink.cut("reissue")
        await self.sink.write(self.opened.splicer.cut(
            attempt, verdict, f"reissue:{nxt.step}", attempt.number, nxt.open_choices,
            wall=time.time()))
        await self._remember_marks()
        return dict(enumerate(nxt.open_choices))

    async def _remember_marks(self) -> None:
        """Keep the marks of what a cut left with the client (``Splicer.marks``), so that
        a later request carrying that reasoning back gets it replaced."""
        now = asyncio.get_running_loop().time()
        for mark in self.opened.splicer.take_marks():
            await self.fleet.remember(prepare.CUT_PREFIX + mark, now)

    async def _fail(self, nxt: Next, err: UpstreamError) -> None:
        """Carry out a ``fail`` from the ladder: count it and report ``err``."""
        accounting.counted(self.metrics, self.ex, nxt)
        await self.failed(err)

    async def failed(self, err: UpstreamError) -> None:
        """Report ``err`` to the client: an error status, or in the stream once it
        started."""
        await self.sink.fail(err, self.opened.splicer.error(err))

    async def crashed(self) -> None:
        """A bug of the sidecar's interrupted the exchange: the client gets a 500, or an
        error in the stream."""
        self.ex.outcome = "error"
        accounting.reissue_done(self.metrics, self.ex, self.ladder.interrupted("error"))
        await self.failed(_InternalError("runaway-sidecar internal error"))

    def disconnected(self) -> None:
        """The client went away (the handler is cancelled)."""
        ex = self.ex
        if not ex.delivered:  # (else ``serve`` settled the exchange as it ended)
            ex.outcome = "client_disconnect"
            self.metrics.client_disconnect(ex.api.route)
            accounting.reissue_done(self.metrics, ex,
                                    self.ladder.interrupted("client_disconnect"))

    def finish(self) -> None:
        """The exchange is over, however it ended: count and log it once."""
        accounting.exchange_done(self.metrics, self.request, self.ex, self.sink)
