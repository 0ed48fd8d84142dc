"""A simulated vLLM 0.32 node (``--reasoning-parser qwen3``) for tests, demos and benchmarks.

Byte-true to the captures in ``tests/data/captures/vllm-0.32.0`` (chat, completions) and
``tests/data/captures/vllm-0.32.0-agent-apis`` (Anthropic ``/v1/messages``, OpenAI
``/v1/responses``); it also speaks as llama.cpp, SGLang and Ollama. The model name picks a
behaviour (``sim-healthy``, ``sim-loop``, …) and ``X-Sim-Fault`` injects faults.
"""

from sidecar.simulator.app import make_simulator_app, run_simulator
from sidecar.simulator.config import SimulatorConfig

__all__ = ["SimulatorConfig", "make_simulator_app", "run_simulator"]
