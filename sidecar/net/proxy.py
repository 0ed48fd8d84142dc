"""The request handlers: where the sidecar's network I/O happens.

Everything that decides lives in pure modules: what a request asks and what bodies it
sends (its wire API, ``sidecar.apis``), what a chunk means and which bytes a splice
writes (the API's attempt and splicer), the plan before the first token
(``sidecar.core.plan``) and what follows each attempt (``sidecar.core.ladder``). The
handlers here only carry those decisions out: they move bytes, run timers and count. The
only other modules that await a socket are ``sidecar.net.sinks`` (writing a watched
response to the client), ``sidecar.net.upstream`` (the watched requests' upstream
connections) and ``sidecar.net.fleet`` (the optional Redis behind the runaway memory).

Two kinds of routes:

- pass-through, for every method and path that is not watched (``sidecar.net.relay``):
  status, headers (minus hop-by-hop) and body are relayed as they arrive, in both
  directions;
- watched, one per registered wire API (``sidecar.apis.REGISTRY``): the upstream stream
  is decoded and fed to the detectors while its original bytes are forwarded. On a
  verdict the handler leaves the upstream response (closing the connection, so vLLM
  aborts the request and frees its KV cache) and walks the reissue ladder.

Cutting always means leaving the ``async with`` block that owns the upstream response.
A client disconnect cancels the handler (``handler_cancellation=True``), which leaves
that block the same way.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import orjson
import structlog
from aiohttp import web
from aiohttp.typedefs import Handler

from detectors import DetectorConfig
from sidecar.config import Config
from sidecar.core.attempt import Attempt, AttemptSpec, Totals
from sidecar.core.bodies import useful_reasoning
from sidecar.core.exchange import Exchange, watchable
from sidecar.core.ladder import Ended, Ladder, Next
from sidecar.core.plan import Refusal, plan
from sidecar.core.wire import Opened, Splicer, WireApi
from sidecar.dialects import DIALECTS, PROBES, detect, effective_config
from sidecar.errors import (
    ClientBodyTimeout,
    RequestTooLarge,
    UpstreamError,
)
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
from sidecar.net.pump import pump
from sidecar.net.relay import Relay
from sidecar.net.sinks import BodySink, Sink, StreamSink
from sidecar.net.upstream import UpstreamPool
from sidecar.obs.metrics import Metrics
from sidecar.policy.rules import Policy, rules_of

log = structlog.get_logger("runaway_sidecar")

#: Runaway-memory keys of the marks of cut reasoning (``Splicer.marks``), apart from the
#: prompt fingerprints.
CUT_PREFIX = "cut:"


class _InternalError(UpstreamError):
    """What the client sees when the sidecar itself failed."""

    status = 500
    error_type = "InternalServerError"


class Proxy:
    """Request handlers bound to one upstream and one config (swapped on reload)."""

    def __init__(self, config: Config, metrics: Metrics) -> None:
        self.dialect = DIALECTS["vllm" if config.dialect == "auto" else config.dialect]
        self.config = effective_config(config, self.dialect)
        self.metrics = metrics
        self.fleet = Fleet(config, metrics)
        self.policy = Policy(rules_of(config.policy.rules, config.policy.presets))
        self.draining = False
        self._base = config.upstream.rstrip("/")
        self._relay = Relay(self._base, metrics)
        # Watched requests: their own connections and HTTP/1.1 reader (``sidecar.net.upstream``)
        # and their own read timeout (``sidecar.net.pump``).
        self._upstream = UpstreamPool(
            self._base, self.config.upstream_connect_timeout_seconds,
            self.config.upstream_keepalive_seconds,
            on_retry=lambda: metrics.upstream_retry("watched"))

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Open the pass-through routes' upstream client (``sidecar.net.relay``; one per
        process), then, with ``dialect = "auto"``, probe the upstream. The watched
        requests' pool (``sidecar.net.upstream``) opens connections as it needs them."""
        await self._relay.start(self.config)
        if self.config.dialect == "auto":
            await self._detect_dialect()

    async def _detect_dialect(self) -> None:
        """``dialect = "auto"``: probe the upstream once and keep what it looks like."""
        found = detect({path: await self._relay.probe(path) for path in PROBES})
        self.dialect = found.dialect
        self.config = effective_config(self.config, self.dialect)
        (log.info if found.certain else log.warning)(
            "dialect_detected", dialect=found.dialect.name, server=found.dialect.server,
            evidence=found.evidence, upstream=self._base)

    async def close(self) -> None:
        """Close the upstream pools and the fleet memory's Redis pool."""
        await self._relay.close()
        self._upstream.close()
        await self.fleet.close()

    def reconfigure(self, config: Config) -> None:
        """Take a reloaded config for requests that start from now on. The upstream, the
        runaway memory and the adaptive budgets (and their Redis) stay as they were, and so
        does the upstream dialect."""
        self.config = effective_config(config, self.dialect)
        self.policy = Policy(rules_of(config.policy.rules, config.policy.presets))

    async def upstream_ready(self) -> bool:
        """Readiness: the upstream answered its dialect's health path with a 2xx."""
        return await self._relay.ready(self.dialect.health_path)

    # -- pass-through ----------------------------------------------------------------

    async def passthrough(self, request: web.Request) -> web.StreamResponse:
        """The handler of every route that is not watched: relay the request as it is
        (``sidecar.net.relay``)."""
        return await self._relay.relay(request, self.config)

    # -- watched routes --------------------------------------------------------------

    def handler(self, api: WireApi) -> Handler:
        """The request handler of a watched API's route."""
        async def watched(request: web.Request) -> web.StreamResponse:
            if api.ollama_native and not self.dialect.native_ndjson:
                return await self._relay.relay(request, self.config)  # "auto" found another server
            return await self._watched(request, api)

        return watched

    async def _watched(self, request: web.Request, api: WireApi) -> web.StreamResponse:
        # One snapshot of the config and policy for the whole exchange: a reload applies
        # to requests that start after it.
        cfg, policy = self.config, self.policy
        route = api.route
        try:
            raw = await read_body(request, cfg)
        except RequestTooLarge:
            self.metrics.request_done(route, "rejected")
            return json_error(api, 413, f"request body exceeds {cfg.max_body_bytes} bytes",
                               "RequestTooLargeError")
        except ClientBodyTimeout:
            self.metrics.request_done(route, "rejected")
            return body_timeout_response(api)
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        if not isinstance(body, dict) or not watchable(raw, body):
            # Not ours to judge: vLLM answers malformed requests with its own 400.
            return await self._relay.relay(request, cfg, raw)
        if not api.watchable(body):
            return await self._relay.relay(request, cfg, raw)
        marks = api.history_marks(body)
        if marks:
            cut = await self.fleet.recalled([CUT_PREFIX + m for m in marks],
                                            asyncio.get_running_loop().time())
            if cut:
                body = api.clean_history(body, {m.removeprefix(CUT_PREFIX) for m in cut})
                raw = orjson.dumps(body)
                accounting.history_cleaned(self.metrics, request, route, len(cut))
        model = body.get("model") if isinstance(body.get("model"), str) else None
        planned = plan(cfg, api, body, request.headers, policy,
                       self.metrics.model_label(model))
        if isinstance(planned, Refusal):
            self.metrics.request_done(route, "rejected", model)
            return json_error(api, 400, planned.message, "BadRequestError",
                               param=planned.param)
        if planned.mode == "off":
            return await self._relay.relay(request, cfg, raw)
        decision = planned.decision
        facts = api.facts(body)
        if (decision.thinking == "off" and decision.source != "client"
                and not facts.thinking_disabled):
            body = api.thinking_off(body, api.off_rules(cfg, self.dialect))
            raw = orjson.dumps(body)
            facts = api.facts(body)
        exposed = api.expose_reasoning(body)
        if exposed is not None:  # the tokens are generated anyway: watch them, then hide them
            body = exposed
            raw = orjson.dumps(body)
        if planned.adaptive:
            planned = planned.with_token_budget(await self.fleet.budget(planned.budget_key))
        ex = Exchange(api=api, config=cfg, model=model, mode=planned.mode,
                      request_id=request.headers.get("X-Request-Id") or uuid.uuid4().hex,
                      started=asyncio.get_running_loop().time(), facts=facts,
                      max_tokens=api.max_tokens(body), budget_key=planned.budget_key)
        accounting.policy(self.metrics, ex, decision)
        opened = api.open(facts, self.dialect, request_id=ex.request_id, model=model)
        fold, splicer = opened.fold, opened.splicer
        sink: Sink = StreamSink(api, request) if fold is None else BodySink(api, fold)
        ladder = Ladder(cfg.reissue.ladder, max_attempts=cfg.reissue.max_attempts,
                        mode=ex.mode, choices=facts.choices, salvageable=facts.salvageable)
        self.metrics.stream_started()
        try:
            try:
                # From here on the request is kept as its bytes and its facts, not parsed:
                # a reissue parses the bytes again.
                first = api.first_body(body, facts)
                serving = self._serve(request, ex, ladder, raw,
                                      raw if first is None else orjson.dumps(first),
                                      planned.detectors, opened, sink)
                del body, first, exposed
                await serving
            except RESETS as exc:
                if not reset_by_client(exc, request):
                    raise
                raise asyncio.CancelledError from None  # the client went away mid-write
            except Exception:
                # A bug of ours must not leave the client with a broken stream.
                log.exception("internal_error", request_id=ex.request_id)
                ex.outcome = "error"
                accounting.reissue_done(self.metrics, ex, ladder.interrupted("error"))
                err = _InternalError("runaway-sidecar internal error")
                await sink.fail(err, splicer.error(err))
            return await sink.finish(ex)
        except asyncio.CancelledError:
            if not ex.delivered:  # (else ``_serve`` settled the exchange as it ended)
                ex.outcome = "client_disconnect"
                self.metrics.client_disconnect(route)
                accounting.reissue_done(self.metrics, ex, ladder.interrupted("client_disconnect"))
            raise
        finally:
            self.metrics.stream_ended()
            accounting.exchange_done(self.metrics, request, ex, sink)

    async def _serve(self, request: web.Request, ex: Exchange, ladder: Ladder, raw: bytes,
                     upstream: bytes, detectors: DetectorConfig, opened: Opened,
                     sink: Sink) -> None:
        """Run the first attempt, which sends ``upstream``, and after a cut the reissue
        ladder, whose bodies are made from ``raw``, the client's request (each replaces
        ``upstream``: only the current attempt's body is kept)."""
        cfg, api, facts, splicer = ex.config, ex.api, ex.facts, opened.splicer
        loop = asyncio.get_running_loop()
        rules = api.off_rules(cfg, self.dialect)
        if (cfg.memory.enabled and ex.mode == "enforce" and not facts.thinking_disabled
                and await self.fleet.recalls(facts.fingerprint, loop.time())):
            upstream = orjson.dumps(api.reissue_body(
                orjson.loads(raw), "no-think", facts, rules=rules, open_choices=facts.choices))
            log.info("runaway_memory_hit", request_id=ex.request_id, model=ex.model)
        earlier = Totals()
        index_map: dict[int, int] = {}
        while True:
            number = ladder.started()
            ex.attempts += 1
            spec = AttemptSpec(number=number, detectors=detectors, started_at=loop.time(),
                               exchange_started=ex.started, earlier=earlier, step=ladder.step,
                               index_map=index_map,
                               stop_on_verdict=ex.mode in ("enforce", "cut"),
                               keep_reasoning=ex.mode == "enforce" and ladder.salvage_ahead)
            attempt = opened.attempt(spec)
            try:
                answer = await pump(self._upstream, request, ex, attempt, upstream, sink)
            except asyncio.CancelledError:
                if ex.delivered:
                    # The client left once it had its response's end, before the upstream
                    # ended the body: the exchange is counted as it ended.
                    self._settle(ex, ladder, attempt)
                raise
            except UpstreamError as err:
                await self._fail(ex, ladder.after(Ended(failed=err.kind)), err, splicer, sink)
                return
            if answer is not None:  # not a stream: an error status, usually
                if number == 0:
                    ex.upstream_status = answer.status
                    await sink.relay(answer.status, answer.headers, answer.body)
                nxt = ladder.after(Ended(status=answer.status))
                if nxt.kind == "fail":
                    refused = UpstreamError(
                        f"reissue failed with upstream status {answer.status}")
                    await self._fail(ex, nxt, refused, splicer, sink)
                return
            nxt = self._settle(ex, ladder, attempt)
            verdict = attempt.verdict
            if nxt.kind == "done":
                if nxt.outcome == "upstream_error" and attempt.error is not None:
                    if not ex.client_stream:
                        # vLLM answers a non-streaming request that fails mid-generation
                        # with an error status, not a 200 holding half a completion.
                        failure = in_stream_error(attempt.error.message, attempt.error.code)
                        await sink.fail(failure, splicer.error(failure))
                elif (verdict is None and number == 0 and cfg.policy.adaptive_budget
                      and attempt.first_content_at is not None and ex.thinking_tokens > 0):
                    await self.fleet.observe_thinking(ex.budget_key, ex.thinking_tokens)
                return
            assert verdict is not None
            if nxt.remember:
                await self.fleet.remember(facts.fingerprint, loop.time())
            earlier = attempt.totals()
            if nxt.kind == "end":
                assert nxt.action is not None
                if nxt.exhausted:
                    self.metrics.ladder_exhausted(ex.model)
                sink.cut(nxt.action)
                await sink.write(splicer.end(
                    attempt, verdict, nxt.action, number, nxt.open_choices, earlier,
                    usage=facts.usage, elapsed=loop.time() - ex.started, wall=time.time()))
                await self._remember_marks(splicer, loop.time())
                return
            assert nxt.step is not None
            body = orjson.loads(raw)
            reasoning = ""
            if nxt.step == "salvage":
                index = attempt.verdict_index if attempt.verdict_index is not None else 0
                reasoning = useful_reasoning(attempt.reasoning_of(index),
                                             verdict.evidence.excerpt)
            upstream = orjson.dumps(api.reissue_body(
                body, nxt.step, facts, rules=rules, open_choices=len(nxt.open_choices),
                reasoning=reasoning))
            del body, reasoning
            index_map = dict(enumerate(nxt.open_choices))
            action = f"reissue:{nxt.step}"
            sink.cut("reissue")
            await sink.write(splicer.cut(attempt, verdict, action, number, nxt.open_choices,
                                         wall=time.time()))
            await self._remember_marks(splicer, loop.time())

    def _settle(self, ex: Exchange, ladder: Ladder, attempt: Attempt) -> Next:
        """Book an attempt that ended: its tokens and verdict, the exchange's outcome and
        how a reissue went; return what the ladder says comes next."""
        accounting.attempt_ended(self.metrics, ex, attempt)
        nxt = ladder.after(Ended(runaway=attempt.verdict is not None,
                                 stream_error=attempt.error is not None,
                                 finished=attempt.finished_choices))
        accounting.counted(self.metrics, ex, nxt, attempt)
        return nxt

    async def _remember_marks(self, splicer: Splicer, now: float) -> None:
        """Keep the marks of what a cut left with the client (``Splicer.marks``), so that
        a later request carrying that reasoning back gets it replaced."""
        for mark in splicer.take_marks():
            await self.fleet.remember(CUT_PREFIX + mark, now)

    async def _fail(self, ex: Exchange, nxt: Next, err: UpstreamError, splicer: Splicer,
                    sink: Sink) -> None:
        """Carry out a ``fail`` from the ladder: count it and report ``err``."""
        accounting.counted(self.metrics, ex, nxt)
        await sink.fail(err, splicer.error(err))
