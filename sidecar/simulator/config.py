"""Configuration of the simulated vLLM node."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SIM_DIALECTS = ("vllm", "llamacpp", "sglang", "ollama")


@dataclass(frozen=True, slots=True)
class SimulatorConfig:
    """How one simulated node behaves; read once when the app is built.

    - ``tokens_per_second``: generation pace of each stream (each engine step emits one token
      per choice). ``0`` means as fast as possible; the node still yields to the event loop
      after every token so disconnects are noticed.
    - ``replay_file``: JSONL of traces with a ``text`` field, served by model ``sim-replay``.
    - ``served_model_name``: an extra accepted model name that behaves like
      ``served_model_behaviour`` (``sim-loop`` unless set; tests that mimic the captures use
      ``tiny-qwen``, or ``sim-replay`` with a trace of the captured model's text).
    - ``max_model_len``: context length; limits and defaults ``max_tokens`` like vLLM.
    - ``seed``: seeds ids, fingerprints and the paraphrase loop, so runs are reproducible.
    - ``dialect``: which server to imitate: ``vllm`` (0.32), ``llamacpp`` (llama-server),
      ``sglang`` (0.5.23) or ``ollama`` (OpenAI layer and native NDJSON API).
    """

    tokens_per_second: float = 65.0
    replay_file: Path | None = None
    served_model_name: str | None = None
    served_model_behaviour: str = "sim-loop"
    max_model_len: int = 8192
    seed: int = 0
    dialect: str = "vllm"

    def __post_init__(self) -> None:
        if self.tokens_per_second < 0:
            raise ValueError("tokens_per_second must be >= 0")
        if self.dialect not in SIM_DIALECTS:
            raise ValueError(f"dialect must be one of {', '.join(SIM_DIALECTS)}")
        if self.max_model_len < 1:
            raise ValueError("max_model_len must be >= 1")
