"""Prometheus metrics of the simulated node, with vLLM 0.32's names and semantics, and the
bookkeeping of one request on them (:class:`Accounting`).

One :class:`SimMetrics` per app, each with its own registry (tests build many apps).
vLLM semantics kept: a request that the client abandons is not counted in
``vllm:request_success_total`` at all; its tokens stop counting when generation stops.
``sim:*`` series exist only on the simulator, for tests.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from sidecar.simulator.engine.generation import Token
from sidecar.simulator.engine.job import Job

ENGINE = "0"
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")


class SimMetrics:
    """The node's counters and gauges. Methods take the model name as label."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, models: Iterable[str]) -> None:
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        self.running = Gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            labels,
            registry=self.registry,
        )
        self.waiting = Gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            labels,
            registry=self.registry,
        )
        self.prompt_tokens = Counter(
            "vllm:prompt_tokens",
            "Number of prefill tokens processed.",
            labels,
            registry=self.registry,
        )
        self.generation_tokens = Counter(
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            labels,
            registry=self.registry,
        )
        self.request_success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*labels, "finished_reason"],
            registry=self.registry,
        )
        self.disconnected = Counter(
            "sim:disconnected_requests",
            "Requests whose client went away before they finished (simulator only).",
            registry=self.registry,
        )
        self.requests = Counter(
            "sim:requests",
            "Generation requests accepted, by model and thinking on/off (simulator only).",
            ["model_name", "thinking"],
            registry=self.registry,
        )
        for model in models:
            self.running.labels(model, ENGINE)
            self.waiting.labels(model, ENGINE)
            self.prompt_tokens.labels(model, ENGINE)
            self.generation_tokens.labels(model, ENGINE)
            for reason in FINISHED_REASONS:
                self.request_success.labels(model, ENGINE, reason)

    def exposition(self) -> bytes:
        """The Prometheus text exposition of this node."""
        return generate_latest(self.registry)


class Accounting:
    """Running/finished bookkeeping of one request on the node's metrics."""

    __slots__ = ("_generated", "_running", "active", "metrics", "model")

    def __init__(self, metrics: SimMetrics, model: str) -> None:
        self.metrics = metrics
        self.model = model
        self.active = 0
        # Resolved once: the per-token path must not look labels up.
        self._generated = metrics.generation_tokens.labels(model, ENGINE)
        self._running = metrics.running.labels(model, ENGINE)

    def start(self, job: Job) -> None:
        m = self.metrics
        m.requests.labels(job.model, "on" if job.thinking else "off").inc()
        m.prompt_tokens.labels(self.model, ENGINE).inc(job.prompt_tokens * job.n)
        self._running.inc(job.n)
        self.active = job.n

    def token(self, token: Token) -> None:
        self._generated.inc()
        if token.finish_reason is not None:
            self.metrics.request_success.labels(self.model, ENGINE, token.finish_reason).inc()
            self._running.dec()
            self.active -= 1

    def fail(self) -> None:
        """The engine errored: every unfinished choice ends with ``error``."""
        if self.active:
            m = self.metrics
            m.request_success.labels(self.model, ENGINE, "error").inc(self.active)
            self._running.dec(self.active)
            self.active = 0

    def end(self, *, disconnected: bool) -> None:
        if self.active:
            self._running.dec(self.active)
            self.active = 0
        if disconnected:
            self.metrics.disconnected.inc()
