"""A validated generation request (what every API's request reader hands the engine),
and the timings a run of it measured."""

from __future__ import annotations

from dataclasses import dataclass

from sidecar.simulator.engine.generation import GenSpec


@dataclass(frozen=True, slots=True)
class Job:
    """A validated generation request."""

    endpoint: str  # the API that asked: "chat", "completions", "messages", "responses"
    model: str
    stream: bool
    n: int
    include_usage: bool
    continuous_usage: bool
    prompt: str
    prompt_tokens: int
    spec: GenSpec
    thinking: bool  # for the sim:requests_total label: was thinking on for this request
    request_id: str | None  # from the body's request_id, if any
    include_reasoning: bool = True  # false: vLLM generates reasoning but does not send it


@dataclass(frozen=True, slots=True)
class Timings:
    """Milliseconds a run spent on the prompt and on generation (llama.cpp reports them)."""

    prompt_ms: float
    predicted_ms: float
