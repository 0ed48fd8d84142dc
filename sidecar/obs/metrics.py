"""Prometheus metrics of the sidecar: names, label sets and the calls that feed them.

Every metric is created on an injected :class:`~prometheus_client.CollectorRegistry`
(no module-level metric objects), so tests build as many :class:`Metrics` as they like.
The proxy calls one small typed method per request or event; nothing else touches
prometheus_client.

Label sets are bounded by construction:

- ``route``, ``outcome``, ``kind``, ``pool``, ``step``, ``channel``, ``mode``, ``action``
  and ``result`` are closed :data:`~typing.Literal` enums, checked by mypy at the call
  site.
- ``model`` goes through :class:`LabelCap` with the configured ``model_allowlist``:
  an exact name is kept, anything else becomes ``other``. The entry ``"*"`` admits any
  name, but only the first ``max_models`` distinct names (default 50) of the process
  lifetime; later ones become ``other``. An empty allow-list maps every model to
  ``other``. Names longer than 128 characters or holding control characters are
  always ``other``.
- ``detector`` and policy ``rule`` names come from code and config, never from a
  request; they are capped the same way (``*`` with a cap of 50) as a last guard.
- Request ids, prompts and completions are never labels.

The ``/metrics`` rendering, single- or multiprocess, is :mod:`sidecar.obs.exposition`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import product
from typing import Final, get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from sidecar.labels import (
    AgentLoopAction,
    Channel,
    LadderStep,
    LoopKind,
    Outcome,
    RecordDrop,
    RecordKind,
    ReissueOutcome,
    ReloadResult,
    Route,
    UpstreamErrorKind,
    UpstreamPoolName,
    WatchedRoute,
    WatchMode,
)
from sidecar.obs.exposition import multiprocess_dir

__all__ = [
    "OTHER",
    "LabelCap",
    "Metrics",
]

PREFIX: Final = "runaway_sidecar_"
OTHER: Final = "other"
DEFAULT_MAX_MODELS: Final = 50
_MAX_NAME_LEN: Final = 128


# Buckets: powers of two cover 64 tokens to the 64k-token contexts in use; the
# seconds buckets run from a sub-second answer to the 10-minute runaways seen in
# the field (141 s at 65 tok/s for one 8k-token request).
TOKEN_BUCKETS: Final = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
THINKING_SECONDS_BUCKETS: Final = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)
TTFC_SECONDS_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)


class LabelCap:
    """Maps free-form names (models, detectors, rules) onto a bounded label set.

    ``allowed`` holds exact names, plus optionally ``"*"``: admit any valid name until
    ``cap`` distinct wildcard names have been seen. Everything else maps to ``other``.
    Not thread-safe; the sidecar calls it from one event loop per process.
    """

    __slots__ = ("_cap", "_exact", "_seen", "_wildcard")

    def __init__(self, allowed: Iterable[str], cap: int = DEFAULT_MAX_MODELS) -> None:
        names = set(allowed)
        self._wildcard = "*" in names
        names.discard("*")
        self._exact = frozenset(n for n in names if _valid(n))
        self._cap = cap
        self._seen: set[str] = set()

    @property
    def exact(self) -> frozenset[str]:
        """The exact names of the allow-list (without ``*``)."""
        return self._exact

    def __call__(self, name: str | None) -> str:
        """Return the label value for ``name`` (``other`` for ``None``)."""
        if name is None:
            return OTHER
        if name in self._exact or name in self._seen:
            return name
        if self._wildcard and len(self._seen) < self._cap and _valid(name):
            self._seen.add(name)
            return name
        return OTHER


def _valid(name: str) -> bool:
    return 0 < len(name) <= _MAX_NAME_LEN and name.isprintable()


class Metrics:
    """All sidecar metrics, registered on ``registry``.

    Build one per process at startup. Each method is called exactly once per event
    it names; the docstrings say when. Methods never raise for label values, since
    the free-form ones are capped.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        model_allowlist: Sequence[str],
        version: str,
        *,
        max_models: int = DEFAULT_MAX_MODELS,
    ) -> None:
        multiprocess_dir()  # fail loudly on a half-configured multiprocess setup
        self._model = LabelCap(model_allowlist, max_models)
        self._detector = LabelCap(["*"], 50)
        self._rule = LabelCap(["*"], 50)
        r = registry

        def counter(name: str, doc: str, labels: tuple[str, ...]) -> Counter:
            return Counter(PREFIX + name, doc, labels, registry=r)

        def histogram(name: str, doc: str, label: str, buckets: Sequence[float]) -> Histogram:
            return Histogram(PREFIX + name, doc, [label], buckets=buckets, registry=r)

        self._requests = counter(
            "requests",
            "Requests finished, by route, outcome and model (empty on pass-through routes).",
            ("route", "outcome", "model"),
        )
        self._runaways = counter(
            "runaways",
            "Runaways acted on (enforce or cut mode), one per detection, reissues included.",
            ("model", "detector", "channel", "mode"),
        )
        self._shadow = counter(
            "shadow_detections",
            "Runaways detected in shadow mode (nothing changed).",
            ("model", "detector", "channel"),
        )
        self._reissues = counter(
            "reissues",
            "Reissue attempts finished, by ladder step and outcome.",
            ("model", "step", "outcome"),
        )
        self._exhausted = counter(
            "ladder_exhausted",
            "Requests whose every ladder step ran away; the client got finish_reason length.",
            ("model",),
        )
        self._wasted = counter(
            "wasted_tokens", "Tokens generated upstream by attempts that were cut.", ("model",)
        )
        self._saved = counter(
            "saved_tokens",
            "Budget left unspent at a cut (max_tokens minus tokens generated): "
            "an upper bound on the tokens the cut saved.",
            ("model",),
        )
        self._output = counter(
            "output_tokens",
            "Tokens generated upstream for watched requests, by channel.",
            ("model", "channel"),
        )
        self._thinking_tokens = histogram(
            "thinking_tokens",
            "Thinking tokens per watched request, all attempts.",
            "model",
            TOKEN_BUCKETS,
        )
        self._thinking_seconds = histogram(
            "thinking_seconds",
            "Seconds spent thinking per watched request, from the first thinking token "
            "to the first content token or the cut.",
            "model",
            THINKING_SECONDS_BUCKETS,
        )
        self._ttfc = histogram(
            "time_to_first_content_seconds",
            "Seconds from request arrival to the first content token sent to the client.",
            "model",
            TTFC_SECONDS_BUCKETS,
        )
        self._detection = histogram(
            "detection_point_tokens",
            "Tokens generated in the attempt when a detector fired.",
            "detector",
            TOKEN_BUCKETS,
        )
        self._upstream_errors = counter("upstream_errors", "Upstream failures, by kind.", ("kind",))
        self._upstream_retries = counter(
            "upstream_retries",
            "Requests sent again on a new upstream connection because the reused keep-alive "
            "connection they were written on closed before any response byte (the upstream "
            "had closed it idle and never read them), by upstream pool.",
            ("pool",),
        )
        self._disconnects = counter(
            "client_disconnects", "Clients that went away before the response ended.", ("route",)
        )
        self._policy = counter("policy_decisions", "Policy decisions, by deciding rule.", ("rule",))
        self._history = counter(
            "history_cleaned",
            "Pieces of cut reasoning a client sent back in a later request, replaced by a note.",
            ("route",),
        )
        self._agent_loops = counter(
            "agent_loops",
            "Requests whose history showed an agent loop across turns, by route, model, "
            "kind (repeat, cycle, text) and what was done (shadow, nudge, refuse, passed).",
            ("route", "model", "kind", "action"),
        )
        self._reloads = counter(
            "config_reloads", "Config reloads (SIGHUP), by result.", ("result",)
        )
        self._fleet_errors = counter(
            "fleet_memory_errors",
            "Redis calls of the fleet memory that failed (the node used local memory).",
            ("op",),
        )
        self._record_offered = counter(
            "record_candidates", "Attempts offered to the trace recorder ([record]): every "
            "detection, and the healthy and budget ones it samples from.", ("kind",))
        self._records = counter("records", "Trace records written, by kind.", ("kind",))
        self._record_bytes = counter("record_bytes", "Bytes of trace records written.", ())
        self._records_dropped = counter(
            "records_dropped", "Trace records not written: the writer's queue was full, or "
            "the disk refused them.", ("reason",))
        self._record_files_removed = counter(
            "record_files_removed", "Trace files deleted to stay under record.max_bytes.", ())
        # Gauges need a multiprocess mode: live streams are summed over live workers;
        # build_info is the same in every worker, so max keeps it at 1.
        self._active = Gauge(
            PREFIX + "active_streams",
            "Requests on watched routes currently streaming.",
            registry=r,
            multiprocess_mode="livesum",
        )
        build = Gauge(
            PREFIX + "build_info",
            "Always 1; the label carries the sidecar version.",
            ["version"],
            registry=r,
            multiprocess_mode="max",
        )
        build.labels(version=version).set(1)

        # Known label values start at 0, so that increase() and rate() see the first
        # event: a series born at 1 has no earlier sample to increase from.
        for kind in get_args(UpstreamErrorKind):
            self._upstream_errors.labels(kind=kind)
        for pool in get_args(UpstreamPoolName):
            self._upstream_retries.labels(pool=pool)
        for result in get_args(ReloadResult):
            self._reloads.labels(result=result)
        for route in get_args(Route):
            self._disconnects.labels(route=route)
        for watched in get_args(WatchedRoute):
            self._history.labels(route=watched)
        models = sorted({*self._model.exact, OTHER})
        for model in models:
            self._exhausted.labels(model=model)
        # 36 series per model (3 routes x 3 kinds x 4 actions): the alert's increase()
        # must see a loop's first request, and a loop may last fewer than two scrapes.
        # Completions requests carry no tool-call history, so never a loop.
        for route in get_args(WatchedRoute):
            if route == "completions":
                continue
            for model, kind, action in product(models, get_args(LoopKind),
                                               get_args(AgentLoopAction)):
                self._agent_loops.labels(route=route, model=model, kind=kind, action=action)
        for kind in get_args(RecordKind):
            self._record_offered.labels(kind=kind)
            self._records.labels(kind=kind)
        for reason in get_args(RecordDrop):
            self._records_dropped.labels(reason=reason)

    def model_label(self, model: str | None) -> str:
        """The label value ``model`` is counted under (for logs that cite it)."""
        return self._model(model)

    def request_done(self, route: Route, outcome: Outcome, model: str | None = None) -> None:
        """Once per request, when its response has ended (or failed).

        ``model`` is the request's model on watched routes and ``None`` on pass-through
        routes (counted with an empty label).
        """
        label = "" if route == "passthrough" else self._model(model)
        self._requests.labels(route=route, outcome=outcome, model=label).inc()

    def runaway(self, model: str | None, detector: str, channel: Channel, mode: WatchMode) -> None:
        """Once per detection, on the first verdict of an attempt (original or reissue).

        ``mode="shadow"`` counts in ``shadow_detections_total`` instead, so dashboards
        never mix what was acted on with what was only observed.
        """
        m = self._model(model)
        d = self._detector(detector)
        if mode == "shadow":
            self._shadow.labels(model=m, detector=d, channel=channel).inc()
        else:
            self._runaways.labels(model=m, detector=d, channel=channel, mode=mode).inc()

    def reissue(self, model: str | None, step: LadderStep, outcome: ReissueOutcome) -> None:
        """Once per reissue attempt, when it ends; ``runaway`` means the next step runs."""
        self._reissues.labels(model=self._model(model), step=step, outcome=outcome).inc()

    def ladder_exhausted(self, model: str | None) -> None:
        """Once per request whose last ladder step ran away too."""
        self._exhausted.labels(model=self._model(model)).inc()

    def wasted_tokens(self, model: str | None, n: int) -> None:
        """Once per cut attempt: the tokens it had generated upstream before the cut."""
        if n > 0:
            self._wasted.labels(model=self._model(model)).inc(n)

    def saved_tokens(self, model: str | None, n: int) -> None:
        """Once per cut attempt: ``max_tokens`` (or the effective budget) minus the
        tokens generated, when the proxy knows the budget."""
        if n > 0:
            self._saved.labels(model=self._model(model)).inc(n)

    def observe_thinking(self, model: str | None, tokens: int, seconds: float) -> None:
        """Once per watched request when it ends: thinking tokens over all attempts,
        and the seconds spent thinking. Also adds to ``output_tokens_total``."""
        m = self._model(model)
        self._thinking_tokens.labels(model=m).observe(tokens)
        self._thinking_seconds.labels(model=m).observe(seconds)
        if tokens > 0:
            self._output.labels(model=m, channel="thinking").inc(tokens)

    def content_tokens(self, model: str | None, n: int) -> None:
        """Once per watched request when it ends: content tokens over all attempts."""
        if n > 0:
            self._output.labels(model=self._model(model), channel="content").inc(n)

    def observe_ttfc(self, model: str | None, seconds: float) -> None:
        """Once per watched request, when its first content token goes to the client."""
        self._ttfc.labels(model=self._model(model)).observe(seconds)

    def detection_point(self, detector: str, tokens: int) -> None:
        """Together with :meth:`runaway`: tokens of the attempt when the detector fired."""
        self._detection.labels(detector=self._detector(detector)).observe(tokens)

    def upstream_error(self, kind: UpstreamErrorKind) -> None:
        """Once per failed upstream exchange (original or reissue)."""
        self._upstream_errors.labels(kind=kind).inc()

    def upstream_retry(self, pool: UpstreamPoolName) -> None:
        """Once per request sent again because its reused connection closed unanswered."""
        self._upstream_retries.labels(pool=pool).inc()

    def stream_started(self) -> None:
        """When a watched request starts streaming from the upstream."""
        self._active.inc()

    def stream_ended(self) -> None:
        """Exactly once for every :meth:`stream_started`, in a ``finally``."""
        self._active.dec()

    def client_disconnect(self, route: Route) -> None:
        """Once per request whose client went away before the response ended."""
        self._disconnects.labels(route=route).inc()

    def history_cleaned(self, route: WatchedRoute, pieces: int) -> None:
        """A request's history carried back ``pieces`` of reasoning the sidecar had cut."""
        self._history.labels(route=route).inc(pieces)

    def agent_loop(self, route: WatchedRoute, model: str | None, kind: LoopKind,
                   action: AgentLoopAction) -> None:
        """Once per request whose history showed an agent loop, before any upstream
        attempt."""
        self._agent_loops.labels(route=route, model=self._model(model), kind=kind,
                                 action=action).inc()

    def policy_decision(self, rule: str) -> None:
        """Once per request that a policy rule decided (named in the config)."""
        self._policy.labels(rule=self._rule(rule)).inc()

    def fleet_error(self, op: str) -> None:
        """Once per failed Redis call of the fleet memory (the node fell back to local)."""
        self._fleet_errors.labels(op=self._rule(op)).inc()

    def record_offered(self, kind: RecordKind) -> None:
        """Once per attempt the trace recorder is offered (it may sample it out)."""
        self._record_offered.labels(kind=kind).inc()

    def record_written(self, kind: RecordKind, size: int) -> None:
        """Once per trace record written, with its size in bytes (the writer thread)."""
        self._records.labels(kind=kind).inc()
        self._record_bytes.inc(size)

    def record_dropped(self, reason: RecordDrop) -> None:
        """Once per trace record dropped (queue full, or a failed write)."""
        self._records_dropped.labels(reason=reason).inc()

    def record_file_removed(self) -> None:
        """Once per trace file deleted to stay under the size cap (the writer thread)."""
        self._record_files_removed.inc()

    def reload(self, result: ReloadResult) -> None:
        """Once per SIGHUP: ``ok`` when the new config is in force, else ``error``."""
        self._reloads.labels(result=result).inc()
