"""Request validation of the simulated node: JSON body in, a :class:`Job` or an
:class:`ApiError` out. Pure; mirrors the checks and the order of vLLM 0.32 where known.

The messages of the two captured errors (unknown model, ``max_tokens`` too large) are
exact; the wording of the other 400s follows vLLM's validators but was not captured.
``server="llamacpp"`` checks as a real llama-server does (tests/data/captures/llama.cpp):
one model per server, so the name is not checked (an unknown one is served as
``sim-loop``); ``max_tokens`` beyond the context is no error, generation stops at the
context's end; a prompt that does not fit is ``exceed_context_size_error``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sidecar.simulator.common.errors import ApiError
from sidecar.simulator.common.thinking import thinking_enabled
from sidecar.simulator.engine.generation import GenSpec, Mode, RepetitionParams
from sidecar.simulator.engine.job import Job
from sidecar.simulator.engine.tokenizer import (
    message_text,
    render_chat,
    think_state_of_prompt,
    tokenize,
)

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # vLLM's CompletionRequest default
#: llama.cpp's error type for a prompt longer than a slot's context.
CONTEXT_OVERFLOW = "exceed_context_size_error"


def _bad(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, "BadRequestError", param)


def _validation(message: str, param: str, value: object = None) -> ApiError:
    extras = [f"parameter={param}"]
    if value is not None:
        extras.append(f"value={value}")
    return _bad(f"{message} ({', '.join(extras)})", param)


def _int_field(body: Mapping[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _validation(f"`{name}` must be an integer.", name, value)
    return value


def _repetition(body: Mapping[str, Any]) -> RepetitionParams | None:
    raw = body.get("repetition_detection")
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise _validation("`repetition_detection` must be an object.", "repetition_detection")
    values: dict[str, int] = {}
    for key in ("max_pattern_size", "min_pattern_size", "min_count"):
        value = raw.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise _validation(f"`{key}` must be a non-negative integer.", key, value)
        values[key] = value
    if values["max_pattern_size"] <= 0 or values["min_count"] < 2:
        return None
    return RepetitionParams(**values)


def _budget(body: Mapping[str, Any]) -> int | None:
    budget = body.get("thinking_token_budget")
    if budget is None:
        return None
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < -1:
        raise _validation(
            "thinking_token_budget must be a non-negative integer or -1.",
            "thinking_token_budget",
            budget,
        )
    return None if budget == -1 else budget


def _stream_flags(body: Mapping[str, Any]) -> tuple[bool, bool, bool]:
    stream = body.get("stream") is True
    options = body.get("stream_options")
    if options and not stream:
        raise _validation(
            "Stream options can only be defined when `stream=True`.", "stream_options"
        )
    if options is not None and not isinstance(options, Mapping):
        raise _validation("`stream_options` must be an object.", "stream_options")
    include = bool(options and options.get("include_usage"))
    continuous = include and bool(options and options.get("continuous_usage_stats"))
    return stream, include, continuous


def _llamacpp_max_tokens(requested: int | None, prompt_tokens: int, max_model_len: int) -> int:
    if prompt_tokens >= max_model_len:
        raise ApiError(
            400,
            f"request ({prompt_tokens} tokens) exceeds the available context size "
            f"({max_model_len} tokens), try increasing it",
            CONTEXT_OVERFLOW,
            details={"n_prompt_tokens": prompt_tokens, "n_ctx": max_model_len},
        )
    room = max_model_len - prompt_tokens
    # ⚠ Not captured: max_tokens 0 or negative (llama.cpp's -1 is "no limit").
    return room if requested is None or requested <= 0 else min(requested, room)


def _max_tokens(
    body: Mapping[str, Any], prompt_tokens: int, max_model_len: int, default: int | None,
    server: str = "vllm",
) -> int:
    requested = _int_field(body, "max_completion_tokens")
    if requested is None:
        requested = _int_field(body, "max_tokens")
    if server == "llamacpp":
        return _llamacpp_max_tokens(requested, prompt_tokens, max_model_len)
    if requested is None:
        requested = default
    if requested is not None and requested > max_model_len:
        raise _validation(
            f"max_tokens={requested} cannot be greater than max_model_len={max_model_len}. "
            "Please request fewer output tokens.",
            "max_tokens",
            requested,
        )
    if requested is not None and requested < 1:
        raise _validation("max_tokens must be at least 1.", "max_tokens", requested)
    if prompt_tokens >= max_model_len:
        raise _validation(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"request has {prompt_tokens} input tokens. Please reduce the length of the "
            "input messages.",
            "input_tokens",
            prompt_tokens,
        )
    if requested is None:
        return max_model_len - prompt_tokens
    if prompt_tokens + requested > max_model_len:
        raise _validation(
            f"'max_tokens' or 'max_completion_tokens' is too large: {requested}. This "
            f"model's maximum context length is {max_model_len} tokens and your request has "
            f"{prompt_tokens} input tokens ({requested} > {max_model_len} - {prompt_tokens}).",
            "max_tokens",
            requested,
        )
    return requested


def _n(body: Mapping[str, Any]) -> int:
    n = _int_field(body, "n")
    if n is None:
        return 1
    if not 1 <= n <= 128:
        raise _validation("n must be between 1 and 128.", "n", n)
    return n


def _model(body: Mapping[str, Any], known: tuple[str, ...], server: str = "vllm") -> str:
    model = body.get("model")
    if server == "llamacpp" and (not isinstance(model, str) or model not in known):
        return "sim-loop"
    if not isinstance(model, str) or model not in known:
        shown = model if isinstance(model, str) else str(model)
        raise ApiError(
            404,
            f"The model `{shown}` does not exist. Valid aliases: {', '.join(known)}.",
            "NotFoundError",
            "model",
        )
    return model


def _job(
    body: Mapping[str, Any],
    endpoint: str,
    flags: tuple[bool, bool, bool],
    prompt: str,
    mode: Mode,
    *,
    thinking: bool,
    include_reasoning: bool,
    known: tuple[str, ...],
    max_model_len: int,
    default_max_tokens: int | None,
    server: str,
) -> Job:
    """The checks both endpoints make after their own body checks, in vLLM's order
    (thinking budget, repetition detection, ``n``, model, then ``max_tokens`` against the
    prompt's length), and the :class:`Job` they build (raises :class:`ApiError`)."""
    budget = _budget(body)
    repetition = _repetition(body)
    n = _n(body)
    model = _model(body, known, server)
    prompt_tokens = len(tokenize(prompt))
    max_tokens = _max_tokens(body, prompt_tokens, max_model_len, default_max_tokens, server)
    stream, include, continuous = flags
    request_id = body.get("request_id")
    return Job(
        endpoint=endpoint,
        model=model,
        stream=stream,
        n=n,
        include_usage=include,
        continuous_usage=continuous,
        prompt=prompt,
        prompt_tokens=prompt_tokens,
        spec=GenSpec(max_tokens, mode, budget, repetition, stream=stream),
        thinking=thinking,
        request_id=request_id if isinstance(request_id, str) else None,
        include_reasoning=include_reasoning,
    )


def parse_chat(body: object, *, known: tuple[str, ...], max_model_len: int,
               server: str = "vllm") -> Job:
    """Validate a ``/v1/chat/completions`` body (raises :class:`ApiError`); ``server``:
    whose checks (see the module docstring)."""
    if not isinstance(body, Mapping):
        raise _bad("The request body must be a JSON object.")
    flags = _stream_flags(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _validation("`messages` must be a non-empty list.", "messages")
    if not all(isinstance(m, Mapping) for m in messages):
        raise _validation("Every message must be an object.", "messages")
    add_prompt = body.get("add_generation_prompt", True) is not False
    cont = body.get("continue_final_message") is True
    if add_prompt and cont:
        raise _bad("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
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
    return _job(
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


def parse_completion(body: object, *, known: tuple[str, ...], max_model_len: int,
                     server: str = "vllm") -> Job:
    """Validate a ``/v1/completions`` body (raises :class:`ApiError`). Only one prompt
    string is supported; the raw prompt decides whether the model starts thinking."""
    if not isinstance(body, Mapping):
        raise _bad("The request body must be a JSON object.")
    flags = _stream_flags(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str) or prompt == "":
        raise _validation(
            "Either prompt or prompt_embeds must be provided and non-empty.", "prompt"
        )
    state = think_state_of_prompt(prompt)
    mode = {"closed": Mode.NO_THINK, "open": Mode.THINK_PREFILLED, "none": Mode.THINK}[state]
    return _job(
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
