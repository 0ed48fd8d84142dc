"""Reading a ``/v1/completions`` body on the simulated node: one prompt string, whose raw
text decides whether the model starts thinking, then the checks both OpenAI-style routes
make (:mod:`~sidecar.simulator.common.openai_request`). Pure: JSON in, a
:class:`~sidecar.simulator.engine.job.Job` or an error out.
"""

from __future__ import annotations

from collections.abc import Mapping

from sidecar.simulator.common.openai_request import bad, build_job, stream_flags, validation_error
from sidecar.simulator.engine.generation import Mode
from sidecar.simulator.engine.job import Job
from sidecar.simulator.engine.tokenizer import think_state_of_prompt

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # vLLM's CompletionRequest default


def parse_completion(body: object, *, known: tuple[str, ...], max_model_len: int,
                     server: str = "vllm") -> Job:
    """Validate a ``/v1/completions`` body (raises :class:`ApiError`). Only one prompt
    string is supported; the raw prompt decides whether the model starts thinking."""
    if not isinstance(body, Mapping):
        raise bad("The request body must be a JSON object.")
    flags = stream_flags(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str) or prompt == "":
        raise validation_error(
            "Either prompt or prompt_embeds must be provided and non-empty.", "prompt"
        )
    state = think_state_of_prompt(prompt)
    mode = {"closed": Mode.NO_THINK, "open": Mode.THINK_PREFILLED, "none": Mode.THINK}[state]
    return build_job(
        body,
        "completions",
        flags,
        prompt,
        mode,
        thinking=state != "closed",
        include_reasoning=True,
        known=known,
        max_model_len=max_model_len,
        default_max_tokens=COMPLETIONS_DEFAULT_MAX_TOKENS,
        server=server,
    )
