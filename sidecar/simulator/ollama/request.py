"""Reading an Ollama native request (``/api/chat``, ``/api/generate``) on the simulated
node: the body is rewritten as the chat request it amounts to and checked as one. Pure:
JSON in, a :class:`~sidecar.simulator.engine.job.Job` or an error out.

- ``think``: a boolean or a level; unset means on for thinking models (all ``sim-*``).
- ``options.num_predict`` (a positive integer) caps the output; unset, the context does.
"""

from __future__ import annotations

from typing import Any

from sidecar.simulator.chat.request import parse_chat
from sidecar.simulator.engine.job import Job


def internal_body(body: dict[str, Any], *, chat: bool) -> dict[str, Any]:
    """The native request as the shared (vLLM-shaped) validator reads it."""
    think = body.get("think")
    options = body.get("options") if isinstance(body.get("options"), dict) else {}
    out: dict[str, Any] = {"model": body.get("model")}
    if chat:
        out["messages"] = body.get("messages")
    else:
        prompt = body.get("prompt")
        out["messages"] = [{"role": "user", "content": prompt if isinstance(prompt, str) else ""}]
    num_predict = options.get("num_predict") if isinstance(options, dict) else None
    if isinstance(num_predict, int) and not isinstance(num_predict, bool) and num_predict > 0:
        out["max_tokens"] = num_predict
    out["chat_template_kwargs"] = {"enable_thinking": think is not False}
    return out


def parse_native(body: dict[str, Any], *, chat: bool, known: tuple[str, ...],
                 max_model_len: int) -> Job:
    """Validate a native body as the chat request it amounts to (raises
    :class:`~sidecar.simulator.common.errors.ApiError`)."""
    return parse_chat(internal_body(body, chat=chat), known=known, max_model_len=max_model_len)
