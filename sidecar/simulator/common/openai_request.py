"""Reading the two OpenAI-style requests (``/v1/chat/completions``, ``/v1/completions``) on
the simulated node: what both check after their own body checks, in vLLM 0.32's order, and
how each server's OpenAI layer reads its own fields. Pure: JSON in, a
:class:`~sidecar.simulator.engine.job.Job` or an :class:`ApiError` out.

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
from sidecar.simulator.common.openai_wire import CONTEXT_OVERFLOW
from sidecar.simulator.engine.generation import GenSpec, Mode, RepetitionParams
from sidecar.simulator.engine.job import Job
from sidecar.simulator.engine.tokenizer import tokenize


def bad(message: str, param: str | None = None) -> ApiError:
    """A 400 with vLLM's ``BadRequestError`` type."""
    return ApiError(400, message, "BadRequestError", param)


def validation_error(message: str, param: str, value: object = None) -> ApiError:
    """A 400 worded as vLLM's validators word it: ``(parameter=…, value=…)`` appended."""
    extras = [f"parameter={param}"]
    if value is not None:
        extras.append(f"value={value}")
    return bad(f"{message} ({', '.join(extras)})", param)


def _int_field(body: Mapping[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise validation_error(f"`{name}` must be an integer.", name, value)
    return value


def _repetition(body: Mapping[str, Any]) -> RepetitionParams | None:
    raw = body.get("repetition_detection")
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise validation_error("`repetition_detection` must be an object.", "repetition_detection")
    values: dict[str, int] = {}
    for key in ("max_pattern_size", "min_pattern_size", "min_count"):
        value = raw.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise validation_error(f"`{key}` must be a non-negative integer.", key, value)
        values[key] = value
    if values["max_pattern_size"] <= 0 or values["min_count"] < 2:
        return None
    return RepetitionParams(**values)


def _budget(body: Mapping[str, Any]) -> int | None:
    budget = body.get("thinking_token_budget")
    if budget is None:
        return None
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < -1:
        raise validation_error(
            "thinking_token_budget must be a non-negative integer or -1.",
            "thinking_token_budget",
            budget,
        )
    return None if budget == -1 else budget


def stream_flags(body: Mapping[str, Any]) -> tuple[bool, bool, bool]:
    """``stream``, ``include_usage`` and ``continuous_usage_stats``, checked."""
    stream = body.get("stream") is True
    options = body.get("stream_options")
    if options and not stream:
        raise validation_error(
            "Stream options can only be defined when `stream=True`.", "stream_options"
        )
    if options is not None and not isinstance(options, Mapping):
        raise validation_error("`stream_options` must be an object.", "stream_options")
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
        raise validation_error(
            f"max_tokens={requested} cannot be greater than max_model_len={max_model_len}. "
            "Please request fewer output tokens.",
            "max_tokens",
            requested,
        )
    if requested is not None and requested < 1:
        raise validation_error("max_tokens must be at least 1.", "max_tokens", requested)
    if prompt_tokens >= max_model_len:
        raise validation_error(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"request has {prompt_tokens} input tokens. Please reduce the length of the "
            "input messages.",
            "input_tokens",
            prompt_tokens,
        )
    if requested is None:
        return max_model_len - prompt_tokens
    if prompt_tokens + requested > max_model_len:
        raise validation_error(
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
        raise validation_error("n must be between 1 and 128.", "n", n)
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


def build_job(
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


def request_body(dialect: str, body: object) -> object:
    """A request to a simulated ``dialect`` server, rewritten to the fields the shared
    (vLLM-shaped) validator reads, so each server honours its own switches only:

    - llama.cpp: ``reasoning_budget_tokens`` (else ``thinking_budget_tokens``; -1 for
      none) is its thinking budget, and 0 is thinking off (the server ends thinking at
      once; the tiny e2e model then answers, as with thinking off); vLLM's
      ``thinking_token_budget`` and ``continuous_usage_stats`` are unknown there;
    - SGLang: ``chat_template_kwargs`` and ``reasoning_effort`` as in vLLM; no budget field;
    - Ollama (OpenAI layer): ``reasoning_effort`` (or ``reasoning.effort``) ``"none"`` is
      ``think: false``; ``chat_template_kwargs`` is ignored.
    """
    if dialect == "vllm" or not isinstance(body, dict):
        return body
    out = {k: v for k, v in body.items()
           if k not in ("thinking_token_budget", "repetition_detection")}
    if dialect == "llamacpp":
        thinking = out.pop("thinking_budget_tokens", None)
        budget = out.pop("reasoning_budget_tokens", thinking)
        if budget == 0:
            kwargs = out.get("chat_template_kwargs")
            out["chat_template_kwargs"] = {**(kwargs if isinstance(kwargs, dict) else {}),
                                           "enable_thinking": False}
        elif budget is not None:
            out["thinking_token_budget"] = budget
        options = out.get("stream_options")
        if isinstance(options, dict) and "continuous_usage_stats" in options:
            out["stream_options"] = {k: v for k, v in options.items()
                                     if k != "continuous_usage_stats"}
    elif dialect == "ollama":
        out.pop("chat_template_kwargs", None)
        effort = out.pop("reasoning_effort", None)
        nested = out.pop("reasoning", None)
        if isinstance(nested, dict) and effort is None:
            effort = nested.get("effort")
        if effort == "none":
            out["chat_template_kwargs"] = {"enable_thinking": False}
    return out
