"""Reading an OpenAI ``/v1/responses`` body on the simulated node: vLLM 0.32's
``ResponsesRequest`` checks (its before-validators first), its handler's checks, the
prompt it renders, the node's thinking switches, and the request fields the response
object echoes. Pure: JSON in, a :class:`ResponsesJob` or an error out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sidecar.simulator.common.errors import ApiError, known_model
from sidecar.simulator.common.thinking import SWITCHES, thinking_on
from sidecar.simulator.common.validation import MISSING, Fields, body_mapping
from sidecar.simulator.engine.generation import GenSpec, Mode
from sidecar.simulator.engine.job import Job
from sidecar.simulator.engine.tokenizer import message_text, render_chat, tokenize

EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
OLLAMA_EFFORTS = ("none", "low", "medium", "high", "max")


@dataclass(frozen=True, slots=True)
class ResponsesJob:
    """A validated ``/v1/responses`` request: the generation :class:`Job`, the response id,
    and the request fields the response object echoes (in vLLM's field order)."""

    job: Job
    response_id: str | None
    echo: dict[str, Any] = field(default_factory=dict)
    include_reasoning: bool = True


def not_found(response_id: str) -> ApiError:
    """vLLM's answer for a response id it does not hold (always, without the store)."""
    return ApiError(404, f"Response with id '{response_id}' not found.",
                    "invalid_request_error", "response_id")


def _reasoning_echo(raw: Mapping[str, Any]) -> dict[str, Any]:
    # The fields of openai 3.63's ``Reasoning`` model, in its order (unset ones null).
    return {k: raw.get(k) for k in ("context", "effort", "generate_summary", "mode", "summary")}


_FUNCTION_TOOL_FIELDS = ("name", "parameters", "strict", "type", "allowed_callers", "async",
                         "defer_loading", "description", "output_schema")


def _tools_echo(tools: object) -> list[Any]:
    """⚠ Function tools are echoed with openai 3.63's ``FunctionTool`` fields (rebuilt from
    the model, not captured); other tool types as sent."""
    if not isinstance(tools, list):
        return []
    return [{k: t.get(k) for k in _FUNCTION_TOOL_FIELDS}
            if isinstance(t, Mapping) and t.get("type") == "function" else t for t in tools]


def _text_echo(text: object) -> object:
    if isinstance(text, Mapping):
        return {"format": text.get("format"), "verbosity": text.get("verbosity")}
    return None


def _check_responses(body: object, dialect: str) -> tuple[Mapping[str, Any], Fields]:
    data = body_mapping(body)
    tools = data.get("tools")
    has_tools = isinstance(tools, list) and len(tools) > 0
    choice = data.get("tool_choice", "auto")
    if not has_tools and choice == "required":
        raise ApiError(400, "Tool choice 'required' must be specified with 'tools' parameter. "
                            "(parameter=tool_choice)", "BadRequestError", "tool_choice")
    if not has_tools and isinstance(choice, Mapping) and choice.get("type") in (
            "function", "custom"):
        raise ApiError(400, "Tool choice 'function' not found in 'tools' parameter. "
                            "(parameter=tool_choice)", "BadRequestError", "tool_choice")
    if not has_tools and choice in ("auto", "none"):
        data = {**data, "tool_choice": "none"}  # the validator writes it into the body
    if data.get("prompt") is not None:
        raise ApiError(400, "prompt template is not supported (parameter=prompt)",
                       "BadRequestError", "prompt")
    if data.get("background") and not data.get("store", True):
        raise ApiError(400, "background can only be used when `store` is true "
                            "(parameter=background)", "BadRequestError", "background")
    f = Fields(data)
    f.boolean(data.get("background"), "body.background", default=False)
    raw_input = f.missing("input", data, "body.input")
    if raw_input is not MISSING:
        if raw_input is None:
            f.fail("string_type", "body.input", "Input should be a valid string", None)
            f.fail("list_type", "body.input", "Input should be a valid list", None)
        else:
            f.text_or_list(raw_input, "body.input")
    f.string(data.get("instructions"), "body.instructions", optional=True)
    f.integer(data.get("max_output_tokens"), "body.max_output_tokens", optional=True)
    f.mapping(data.get("metadata"), "body.metadata")
    f.string(data.get("model"), "body.model", optional=True)
    reasoning = f.obj(data.get("reasoning"), "body.reasoning")
    if reasoning is not None and reasoning.get("effort") is not None:
        f.literal(reasoning.get("effort"), "body.reasoning.effort", EFFORTS)
    f.boolean(data.get("include_reasoning"), "body.include_reasoning", default=True)
    f.boolean(data.get("store"), "body.store", default=True)
    f.boolean(data.get("stream"), "body.stream", default=False)
    f.number(data.get("temperature"), "body.temperature")
    f.number(data.get("top_p"), "body.top_p")
    f.string(data.get("user"), "body.user", optional=True)
    f.mapping(data.get("chat_template_kwargs"), "body.chat_template_kwargs")
    f.raise_if_any()
    if dialect == "ollama" and reasoning is not None:
        effort = reasoning.get("effort")
        if effort and effort not in OLLAMA_EFFORTS:
            raise ApiError(400, f'invalid reasoning value: "{effort}" (must be "high", '
                                '"medium", "low", "max", or "none")')
    return data, f


def responses_chat(data: Mapping[str, Any]) -> list[dict[str, str]]:
    """``instructions`` and ``input`` as chat messages (text parts only; reasoning items and
    tool calls of earlier turns are not rendered)."""
    chat: list[dict[str, str]] = []
    if isinstance(data.get("instructions"), str):
        chat.append({"role": "system", "content": data["instructions"]})
    raw = data.get("input")
    if isinstance(raw, str):
        chat.append({"role": "user", "content": raw})
        return chat
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type", "message")
        if kind == "message" and "role" in item:
            chat.append({"role": str(item["role"]), "content": _parts_text(item.get("content"))})
        elif kind == "function_call_output":
            chat.append({"role": "tool", "content": str(item.get("output", ""))})
    return chat


def _parts_text(content: object) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return message_text(content)


def parse_responses(body: object, *, dialect: str, known: tuple[str, ...],
                    default_model: str, max_model_len: int) -> ResponsesJob:
    """Validate a ``/v1/responses`` body (raises :class:`BodyValidationError` or
    :class:`ApiError`) in vLLM's order: the request model's before-validators, its fields,
    the model, ``background`` without the store, ``previous_response_id``, then the output
    limit and the prompt's length. Without ``model`` the node's default model answers."""
    data, f = _check_responses(body, dialect)
    model = data.get("model") or default_model
    known_model(str(model), known)
    if data.get("background") and data.get("store", True) is not False:
        raise ApiError(400, "This vLLM engine does not support `store=True` and therefore "
                            "does not support the background mode. To enable these features, "
                            "set the environment variable `VLLM_ENABLE_RESPONSES_API_STORE=1` "
                            "when launching the vLLM server.", "invalid_request_error",
                       "background")
    previous = data.get("previous_response_id")
    if previous is not None:
        raise not_found(str(previous))
    requested = f.integer(data.get("max_output_tokens"), "", optional=True)
    if requested is not None and requested > max_model_len:
        raise ApiError(400, f"max_output_tokens={requested} cannot be greater than "
                            f"max_model_len={max_model_len}. Please request fewer output "
                            f"tokens. (parameter=max_output_tokens, value={requested})",
                       "BadRequestError", "max_output_tokens")
    reasoning = data.get("reasoning") if isinstance(data.get("reasoning"), Mapping) else None
    effort = reasoning.get("effort") if reasoning else None
    switch = SWITCHES[dialect]
    thinking = thinking_on(switch, data.get("chat_template_kwargs"),
                            effort if switch.effort_none_off else None)
    prompt = render_chat(responses_chat(data), add_generation_prompt=True,
                         continue_final_message=False, thinking=thinking)
    prompt_tokens = len(tokenize(prompt))
    if prompt_tokens >= max_model_len:
        raise ApiError(400, f"The engine prompt length {prompt_tokens} exceeds the "
                            f"max_model_len {max_model_len}. Please reduce prompt.",
                       "invalid_request_error", "input")
    room = max_model_len - prompt_tokens
    max_tokens = room if requested is None else min(requested, room)
    if max_tokens < 1:
        raise ApiError(400, "max_output_tokens must be at least 1. (parameter=max_output_tokens"
                            f", value={requested})", "BadRequestError", "max_output_tokens")
    stream = f.boolean(data.get("stream"), "body.stream", default=False)
    include_reasoning = f.boolean(data.get("include_reasoning"), "", default=True)
    request_id = data.get("request_id")
    job = Job(endpoint="responses", model=str(model), stream=stream, n=1, include_usage=True,
              continuous_usage=False, prompt=prompt, prompt_tokens=prompt_tokens,
              spec=GenSpec(max_tokens, Mode.THINK if thinking else Mode.NO_THINK,
                           stream=stream),
              thinking=thinking, request_id=None, include_reasoning=include_reasoning)
    return ResponsesJob(job, request_id if isinstance(request_id, str) else None,
                        _responses_echo(data, f, str(model), max_tokens), include_reasoning)


def _responses_echo(data: Mapping[str, Any], f: Fields, model: str,
                    max_tokens: int) -> dict[str, Any]:
    tools = data.get("tools")
    has_tools = isinstance(tools, list) and len(tools) > 0
    choice = data.get("tool_choice", "auto")
    if not has_tools and choice in ("auto", "none"):
        choice = "none"
    reasoning = data.get("reasoning")
    temperature = f.number(data.get("temperature"), "")
    top_p = f.number(data.get("top_p"), "")
    presence = f.number(data.get("presence_penalty"), "")
    frequency = f.number(data.get("frequency_penalty"), "")
    return {
        "instructions": data.get("instructions"),
        "metadata": data.get("metadata"),
        "model": model,
        "parallel_tool_calls": f.boolean(data.get("parallel_tool_calls"), "", default=True),
        "temperature": 1.0 if temperature is None else temperature,
        "tool_choice": choice,
        "tools": _tools_echo(tools),
        "top_p": 1.0 if top_p is None else top_p,
        "background": f.boolean(data.get("background"), "", default=False),
        "max_output_tokens": max_tokens,
        "max_tool_calls": data.get("max_tool_calls"),
        "previous_response_id": None,
        "prompt": None,
        "reasoning": _reasoning_echo(reasoning) if isinstance(reasoning, Mapping) else None,
        "service_tier": data.get("service_tier") or "auto",
        "text": _text_echo(data.get("text")),
        "top_logprobs": None,
        "truncation": data.get("truncation") or "disabled",
        "user": data.get("user"),
        "presence_penalty": 0.0 if presence is None else presence,
        "frequency_penalty": 0.0 if frequency is None else frequency,
    }
