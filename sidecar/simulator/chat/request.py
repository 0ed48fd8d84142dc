"""Reading a ``/v1/chat/completions`` body on the simulated node: the messages, the
template's generation prompt or a continued final message, the thinking switch, then the
checks both OpenAI-style routes make (:mod:`~sidecar.simulator.common.openai_request`).
Pure: JSON in, a :class:`~sidecar.simulator.engine.job.Job` or an error out.
"""

from __future__ import annotations

from collections.abc import Mapping

from sidecar.simulator.common.openai_request import bad, build_job, stream_flags, validation_error
from sidecar.simulator.common.thinking import thinking_enabled
from sidecar.simulator.engine.generation import Mode
from sidecar.simulator.engine.job import Job
from sidecar.simulator.engine.tokenizer import message_text, render_chat, think_state_of_prompt


def parse_chat(body: object, *, known: tuple[str, ...], max_model_len: int,
               server: str = "vllm") -> Job:
    """Validate a ``/v1/chat/completions`` body (raises :class:`ApiError`); ``server``:
    whose checks (see the module docstring)."""
    if not isinstance(body, Mapping):
        raise bad("The request body must be a JSON object.")
    flags = stream_flags(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise validation_error("`messages` must be a non-empty list.", "messages")
    if not all(isinstance(m, Mapping) for m in messages):
        raise validation_error("Every message must be an object.", "messages")
    add_prompt = body.get("add_generation_prompt", True) is not False
    cont = body.get("continue_final_message") is True
    if add_prompt and cont:
        raise bad("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
    thinking = thinking_enabled(body)
    prompt = render_chat(
        messages, add_generation_prompt=add_prompt, continue_final_message=cont, thinking=thinking
    )
    if cont:
        last = think_state_of_prompt(message_text(messages[-1].get("content")))
        if not thinking:
            mode = Mode.NO_THINK
        elif last == "open":
            mode = Mode.THINK_PREFILLED
        else:
            mode = Mode.CONTINUE
    else:
        mode = Mode.THINK if thinking else Mode.NO_THINK
    return build_job(
        body,
        "chat",
        flags,
        prompt,
        mode,
        thinking=thinking,
        include_reasoning=body.get("include_reasoning", True) is not False,
        known=known,
        max_model_len=max_model_len,
        default_max_tokens=None,
        server=server,
    )
