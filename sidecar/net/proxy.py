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

- pass-through, for every method and path that is not watched: status, headers (minus
  hop-by-hop) and body are relayed as they arrive, in both directions;
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
import errno
import math
import time
import uuid
from types import SimpleNamespace
from typing import Any

import aiohttp
import orjson
import structlog
from aiohttp import web
from aiohttp.typedefs import Handler
from yarl import URL

from detectors import DetectorConfig
from sidecar.apis import api_for_path
from sidecar.codecs.http1 import ProtocolError
from sidecar.config import Config
from sidecar.core.attempt import Attempt, AttemptSpec, Totals
from sidecar.core.bodies import useful_reasoning
from sidecar.core.exchange import Exchange, watchable
from sidecar.core.ladder import Ended, Ladder, Next
from sidecar.core.plan import Refusal, plan
from sidecar.core.wire import Opened, Splicer, WireApi
from sidecar.dialects import DIALECTS, PROBES, ProbeAnswer, detect, effective_config
from sidecar.errors import (
    ClientBodyTimeout,
    RequestTooLarge,
    UpstreamDisconnected,
    UpstreamError,
    Waited,
    map_upstream_exception,
)
from sidecar.labels import Outcome
from sidecar.net import accounting
from sidecar.net.client import (
    RESETS,
    TimedBody,
    body_timeout_response,
    in_stream_error,
    json_error,
    read_body,
    reset_by_client,
    timed_body,
)
from sidecar.net.fleet import Fleet
from sidecar.net.headers import forward_headers
from sidecar.net.sinks import BodySink, Sink, StreamSink
from sidecar.net.upstream import UpstreamPool
from sidecar.obs.metrics import Metrics
from sidecar.policy.rules import Policy, rules_of

log = structlog.get_logger("runaway_sidecar")

_STALL_GRANULARITY = 1.0  # seconds; the stall deadline is pushed back at most this often
#: Runaway-memory keys of the marks of cut reasoning (``Splicer.marks``), apart from the
#: prompt fingerprints.
CUT_PREFIX = "cut:"
#: Pass-through request bodies of a known length up to this size are read whole before they
#: are sent, so that one can be sent again when its reused upstream connection closed before
#: answering. Larger bodies, and bodies of unknown length, are streamed as they arrive and
#: never sent twice.
PASSTHROUGH_RESEND_BYTES = 1024 * 1024


class _InternalError(UpstreamError):
    """What the client sees when the sidecar itself failed."""

    status = 500
    error_type = "InternalServerError"


class _UpstreamStatus(Exception):
    """The upstream answered with something other than a 200 event stream."""

    def __init__(self, status: int, headers: Any, body: bytes) -> None:
        super().__init__(status)
        self.status, self.headers, self.body = status, headers, body


class Proxy:
    """Request handlers bound to one upstream and one config (swapped on reload)."""

    def __init__(self, config: Config, metrics: Metrics) -> None:
        self.dialect = DIALECTS["vllm" if config.dialect == "auto" else config.dialect]
        self.config = effective_config(config, self.dialect)
        self.metrics = metrics
        self.fleet = Fleet(config, metrics)
        self.policy = Policy(rules_of(config.policy.rules, config.policy.presets))
        self._base = config.upstream.rstrip("/")
        self._session: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None  # new connections only, for resends
        # Watched requests: their own connections and HTTP/1.1 reader (``sidecar.net.upstream``)
        # and their own read timeout (``_attempt``).
        self._upstream = UpstreamPool(
            self._base, self.config.upstream_connect_timeout_seconds,
            self.config.upstream_keepalive_seconds,
            on_retry=lambda: metrics.upstream_retry("watched"))
        self.draining = False

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Open the pass-through routes' upstream pool (aiohttp's; one per process), which
        keeps idle connections ``upstream_keepalive_seconds`` (its timer closes them), and a
        second client whose connections are never reused, for resends. The watched
        requests' pool (``sidecar.net.upstream``) opens connections as it needs them."""
        cfg = self.config
        keepalive = cfg.upstream_keepalive_seconds
        reuse = aiohttp.TraceConfig()
        reuse.on_connection_reuseconn.append(_note_reuse)
        self._session = _client(cfg, aiohttp.TCPConnector(
            limit=0, enable_cleanup_closed=True, keepalive_timeout=keepalive,
        ) if keepalive > 0 else aiohttp.TCPConnector(limit=0, force_close=True), [reuse])
        self._fresh = _client(cfg, aiohttp.TCPConnector(limit=0, force_close=True), [])
        if cfg.dialect == "auto":
            await self._detect_dialect()

    async def _detect_dialect(self) -> None:
        """``dialect = "auto"``: probe the upstream once and keep what it looks like."""
        answers: dict[str, ProbeAnswer] = {}
        for path in PROBES:
            try:
                async with await self._request(
                    "GET", self._base + path, timeout=aiohttp.ClientTimeout(total=2)
                ) as resp:
                    answers[path] = ProbeAnswer(resp.status, resp.headers.get("Server", ""),
                                                await resp.content.read(64 * 1024))
            except (TimeoutError, aiohttp.ClientError, OSError):
                answers[path] = ProbeAnswer(None)
        found = detect(answers)
        self.dialect = found.dialect
        self.config = effective_config(self.config, self.dialect)
        (log.info if found.certain else log.warning)(
            "dialect_detected", dialect=found.dialect.name, server=found.dialect.server,
            evidence=found.evidence, upstream=self._base)

    async def close(self) -> None:
        """Close the upstream pools and the fleet memory's Redis pool."""
        for session in (self._session, self._fresh):
            if session is not None:
                await session.close()
        self._upstream.close()
        await self.fleet.close()

    def reconfigure(self, config: Config) -> None:
        """Take a reloaded config for requests that start from now on. The upstream, the
        runaway memory and the adaptive budgets (and their Redis) stay as they were, and so
        does the upstream dialect."""
        self.config = effective_config(config, self.dialect)
        self.policy = Policy(rules_of(config.policy.rules, config.policy.presets))

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "Proxy.start() was not awaited"
        return self._session

    def _url(self, request: web.Request) -> URL:
        # The upstream is fixed by config: the request contributes only path and query,
        # appended to it as text, so no request can make the sidecar call another host.
        return URL(self._base + request.raw_path, encoded=True)

    async def upstream_ready(self) -> bool:
        """Readiness: the upstream answered ``GET /health`` with a 2xx."""
        try:
            async with await self._request(
                "GET", self._base + self.dialect.health_path,
                timeout=aiohttp.ClientTimeout(total=2),
            ) as resp:
                return 200 <= resp.status < 300
        except (TimeoutError, aiohttp.ClientError, OSError):
            return False

    async def _request(self, method: str, url: str | URL, *, data: Any = None,
                       resendable: bool = True, **kwargs: Any) -> aiohttp.ClientResponse:
        """Send a request on the pass-through pool and return its response, whose head has
        arrived (use it as an async context manager). When the request went out on a reused
        connection that closed before any response byte, the upstream had closed it idle
        and never read the request: a ``resendable`` request (its body is held whole, or it
        has none) is then sent once more, on a new connection, and counted. A request whose
        body was streamed is never sent twice."""
        reused = _Reused()
        try:
            return await self.session.request(method, url, data=data, allow_redirects=False,
                                              trace_request_ctx=reused, **kwargs)
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError,
                aiohttp.ClientConnectionResetError) as exc:
            if not (resendable and reused.reused and _unanswered(exc)):
                raise
        self.metrics.upstream_retry("passthrough")
        assert self._fresh is not None
        return await self._fresh.request(method, url, data=data, allow_redirects=False,
                                         **kwargs)

    # -- pass-through ----------------------------------------------------------------

    async def passthrough(self, request: web.Request,
                          body: bytes | None = None) -> web.StreamResponse:
        """Relay any request as-is; ``body`` replaces the request stream when the watched
        handler already read it. A body of a known length up to
        :data:`PASSTHROUGH_RESEND_BYTES` is read whole first, so that the request can be
        sent again (see :meth:`_request`); any other is streamed as it arrives."""
        started = time.monotonic()
        if not request.raw_path.startswith("/"):
            return json_error(None, 400, "request target must be a path", "BadRequestError")
        data: Any = body
        timed: TimedBody | None = None
        resp: web.StreamResponse | None = None
        status: int | None = None
        outcome: Outcome = "ok"
        sent = 0
        try:
            if body is None and request.body_exists:
                length = request.content_length
                if length is not None and length <= PASSTHROUGH_RESEND_BYTES:
                    data = b"".join([chunk async for chunk in timed_body(
                        request, self.config.client_body_timeout_seconds)])
                else:
                    timed = TimedBody(request, self.config.client_body_timeout_seconds)
                    data = timed.chunks()
            async with await self._request(
                request.method, self._url(request), data=data, resendable=timed is None,
                headers=forward_headers(request.headers),
            ) as up:
                status = up.status
                resp = web.StreamResponse(status=up.status, reason=up.reason,
                                          headers=forward_headers(up.headers))
                if up.content_length is not None and "Transfer-Encoding" not in up.headers:
                    resp.content_length = up.content_length
                await resp.prepare(request)
                async for chunk in up.content.iter_any():
                    sent += len(chunk)
                    await resp.write(chunk)
                    del chunk  # not held while the next read waits
                await resp.write_eof()
                return resp
        except asyncio.CancelledError:
            outcome = "client_disconnect"
            self.metrics.client_disconnect("passthrough")
            raise
        except ClientBodyTimeout:
            outcome = "rejected"  # the client's body stalled, not the upstream
            return body_timeout_response(api_for_path(request.path))
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            if resp is not None and reset_by_client(exc, request):
                outcome = "client_disconnect"
                self.metrics.client_disconnect("passthrough")
                # As the watched path does: a client that went away is no server error,
                # and aiohttp logs any other exception from a handler with a traceback.
                raise asyncio.CancelledError from None
            if timed is not None and timed.timed_out and resp is None:
                outcome = "rejected"  # the client's body stalled, not the upstream
                return body_timeout_response(api_for_path(request.path))
            err = map_upstream_exception(exc, headers_received=resp is not None)
            self.metrics.upstream_error(err.kind)
            outcome = "upstream_error"
            if resp is None:
                return json_error(api_for_path(request.path), err.status, str(err),
                                   err.error_type)
            # Headers are gone and the body is not ours to frame: cut the connection
            # so the client sees a truncated response rather than a silent short one.
            if request.transport is not None:
                request.transport.close()
            return resp
        finally:
            accounting.passthrough_done(
                self.metrics, request, outcome=outcome, status=resp.status if resp else 502,
                upstream_status=status, bytes_sent=sent, seconds=time.monotonic() - started)

    # -- watched routes --------------------------------------------------------------

    def handler(self, api: WireApi) -> Handler:
        """The request handler of a watched API's route."""
        async def watched(request: web.Request) -> web.StreamResponse:
            if api.ollama_native and not self.dialect.native_ndjson:
                return await self.passthrough(request)  # "auto" found another server
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
            return await self.passthrough(request, raw)
        if not api.watchable(body):
            return await self.passthrough(request, raw)
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
            return await self.passthrough(request, raw)
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
                await self._attempt(request, ex, attempt, upstream, sink)
            except asyncio.CancelledError:
                if ex.delivered:
                    # The client left once it had its response's end, before the upstream
                    # ended the body: the exchange is counted as it ended.
                    self._settle(ex, ladder, attempt)
                raise
            except _UpstreamStatus as st:
                if number == 0:
                    ex.upstream_status = st.status
                    await sink.relay(st.status, st.headers, st.body)
                nxt = ladder.after(Ended(status=st.status))
                if nxt.kind == "fail":
                    refused = UpstreamError(f"reissue failed with upstream status {st.status}")
                    await self._fail(ex, nxt, refused, splicer, sink)
                return
            except UpstreamError as err:
                await self._fail(ex, ladder.after(Ended(failed=err.kind)), err, splicer, sink)
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

    async def _attempt(self, request: web.Request, ex: Exchange, attempt: Attempt,
                       data: bytes, sink: Sink) -> None:
        """One upstream request with body ``data``, pumped through ``attempt`` into ``sink``."""
        stall = ex.config.detectors.stall_seconds
        read_timeout = ex.config.upstream_read_timeout_seconds or None
        # One deadline serves the clock-driven detectors and the read timeout: it wakes
        # after ``window`` without bytes (the shorter of the two), then every ``step``.
        window = min(w for w in (stall, read_timeout, math.inf) if w is not None)
        # A silence is noticed between ``window`` and ``window + step`` after the last byte.
        step = min(_STALL_GRANULARITY, window / 4)
        loop = asyncio.get_running_loop()
        headers_received = False
        try:
            path = ex.api.path
            # The upstream's answer head within the read timeout, as sock_read would.
            try:
                async with asyncio.timeout(read_timeout):
                    # The headers are built in the call: this frame lives as long as the
                    # stream, and does not keep them.
                    up = await self._upstream.post(path, _upstream_headers(request), data)
            except TimeoutError as exc:  # (without a read timeout: the connect timeout's)
                raise map_upstream_exception(exc, headers_received=False, waited=None if (
                    read_timeout is None) else Waited("head", read_timeout)) from None
            async with up:
                headers_received = True
                ctype = up.headers.get("Content-Type", "")
                if up.status != 200 or not ctype.startswith(
                        ex.api.stream_type):
                    raise _UpstreamStatus(up.status, up.headers, await up.read())
                ex.upstream_status = up.status
                sink.upstream_headers(up.take_headers())
                # The deadline is pushed back at most once per ``step`` while bytes arrive.
                # When it expires the clock-driven detectors look, and reading goes on
                # unless their verdict stops the attempt (not in shadow mode) or nothing
                # came for ``read_timeout``. No byte came after ``heard_by``: a byte read
                # later pushes the deadline back, to ``window`` after the new ``heard_by``.
                heard_by = loop.time() + step
                deadline_at = heard_by + window if window < math.inf else None
                while True:
                    writing = False
                    try:
                        async with asyncio.timeout_at(deadline_at) as deadline:
                            while True:
                                chunk = await up.readany()
                                now = loop.time()
                                if not chunk:
                                    tail = attempt.eof(now)
                                    if tail:
                                        writing = True
                                        await sink.write(tail)
                                    break
                                out = attempt.feed(chunk, now)
                                # Neither the read nor what it became stays bound while
                                # the next read waits: an idle stream would hold both
                                # (up to a whole coalesced read each).
                                del chunk
                                if out:
                                    writing = True
                                    await sink.write(out)
                                    writing = False
                                del out
                                if attempt.done and ex.client_stream:
                                    ex.delivered = True  # the client has its stream's end
                                # ``stopped`` is a property: no call while there is no verdict.
                                if attempt.verdict is not None and attempt.stopped:
                                    break
                                if deadline_at is not None and now > heard_by:
                                    heard_by = now + step
                                    deadline_at = heard_by + window
                                    deadline.reschedule(deadline_at)
                        break
                    except TimeoutError as exc:
                        if not deadline.expired():
                            raise  # not the deadline's: a timeout from further down
                        now = loop.time()
                        if writing:
                            # A client slow to take bytes held the write past the deadline
                            # (the bytes are in the transport already): upstream is not
                            # silent, nothing was read meanwhile.
                            heard_by = now + step
                            deadline_at = heard_by + window
                            continue
                        if read_timeout is not None and now - heard_by >= read_timeout:
                            raise map_upstream_exception(
                                exc, headers_received=True,
                                waited=Waited("silence", read_timeout)) from None
                        if attempt.tick(now) is not None and attempt.stopped:
                            break
                        deadline_at = now + step
                if attempt.stopped:
                    up.close()  # not release(): vLLM must see the disconnect and abort
                elif attempt.truncated:
                    raise UpstreamDisconnected("upstream ended the stream before it finished")
        except (TimeoutError, aiohttp.ClientError, OSError, ProtocolError) as exc:
            if reset_by_client(exc, request):
                raise  # a write to a client that went away: ``_watched`` counts a disconnect
            if (isinstance(exc, TimeoutError) and headers_received
                    and attempt.tick(loop.time()) is not None and attempt.stopped):
                return
            raise map_upstream_exception(exc, headers_received=headers_received) from None

# -- helpers ---------------------------------------------------------------------------------


class _Reused:
    """Whether a pass-through request went out on a reused connection (set by the trace
    callback :func:`_note_reuse`)."""

    __slots__ = ("reused",)

    def __init__(self) -> None:
        self.reused = False


async def _note_reuse(_session: aiohttp.ClientSession, ctx: SimpleNamespace,
                      _params: aiohttp.TraceConnectionReuseconnParams) -> None:
    if isinstance(ctx.trace_request_ctx, _Reused):
        ctx.trace_request_ctx.reused = True


def _unanswered(exc: BaseException) -> bool:
    """Whether ``exc``, raised before the response head, says the connection closed before
    any byte of a response: aiohttp's ``ServerDisconnectedError`` carries what it had parsed
    of a response, and only a text when it had none; a reset comes before any response."""
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return isinstance(exc.message, str)
    if isinstance(exc, aiohttp.ClientConnectionResetError):
        return True
    return isinstance(exc, aiohttp.ClientOSError) and exc.errno in (errno.ECONNRESET,
                                                                    errno.EPIPE)


def _client(cfg: Config, connector: aiohttp.TCPConnector,
            traces: list[aiohttp.TraceConfig]) -> aiohttp.ClientSession:
    """An upstream client for pass-through routes, with the configured timeouts."""
    session = aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(
            total=None,
            connect=cfg.upstream_connect_timeout_seconds,
            sock_read=cfg.upstream_read_timeout_seconds,
        ),
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
        trace_configs=traces,
    )
    # aiohttp resends an idempotent request once when its connection closes before the
    # response, whatever the connection, the body or the bytes received; ``_request``
    # resends by its own rule (any method, reused connection, nothing received, body held)
    # and counts it, so aiohttp's is switched off: a request goes out at most twice.
    session._retry_connection = False
    return session


def _upstream_headers(request: web.Request) -> list[tuple[str, str]]:
    """The client's headers as sent upstream with a watched request's JSON body (hop-by-hop
    ones, ``Accept-Encoding`` and the client's ``Content-Type`` left out)."""
    headers = forward_headers(request.headers, drop=("accept-encoding", "content-type"))
    headers["Content-Type"] = "application/json"
    return list(headers.items())
