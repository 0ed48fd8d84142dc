"""Prometheus metrics of the simulated node, with vLLM 0.32's names and semantics.

One :class:`SimMetrics` per app, each with its own registry (tests build many apps).
vLLM semantics kept: a request that the client abandons is not counted in
``vllm:request_success_total`` at all; its tokens stop counting when generation stops.
``sim:*`` series exist only on the simulator, for tests.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

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
