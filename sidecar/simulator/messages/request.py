"""Reading an Anthropic ``/v1/messages`` (or ``count_tokens``) body on the simulated node:
vLLM 0.32's ``AnthropicMessagesRequest`` checks, the prompt it renders and the thinking
switches of the node's server. Pure: JSON in, a :class:`Job` or an error out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sidecar.simulator.common.errors import ApiError, known_model
from sidecar.simulator.common.thinking import SWITCHES, thinking_on
from sidecar.simulator.common.validation import MISSING, Fields, body_mapping
from sidecar.simulator.engine.generation import GenSpec, Mode
from sidecar.simulator.engine.job import Job
from sidecar.simulator.engine.tokenizer import message_text, render_chat, tokenize

ROLES = ("user", "assistant", "system")
THINKING_TYPES = ("enabled", "disabled", "adaptive")


@dataclass(frozen=True, slots=True)
class Thinking:
    """A validated ``thinking`` config: ``kind`` and, when enabled, its budget."""

    kind: str
    budget_tokens: int | None = None


def _model_name(f: Fields, body: Mapping[str, Any]) -> str | None:
    raw = f.missing("model", body, "body.model")
    if raw is MISSING:
        return None
    model = f.string(raw, "body.model", optional=False)
    if model == "":
        f.fail("value_error", "body.model", "Value error, Model is required", model,
               {"error": ValueError("Model is required")})
    return model


def _messages(f: Fields, body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    raw = f.missing("messages", body, "body.messages")
    if raw is MISSING:
        return []
    if not isinstance(raw, list):
        f.fail("list_type", "body.messages", "Input should be a valid list", raw)
        return []
    out: list[Mapping[str, Any]] = []
    for i, item in enumerate(raw):
        loc = f"body.messages.{i}"
        if not isinstance(item, Mapping):
            f.fail("model_attributes_type", loc,
                   "Input should be a valid dictionary or object to extract fields from", item)
            continue
        msg = item
        role = f.missing("role", msg, f"{loc}.role")
        if role is not MISSING:
            f.literal(role, f"{loc}.role", ROLES)
        content = f.missing("content", msg, f"{loc}.content")
        if content is not MISSING:
            if content is None:
                f.fail("string_type", f"{loc}.content", "Input should be a valid string", None)
                f.fail("list_type", f"{loc}.content", "Input should be a valid list", None)
            else:
                f.text_or_list(content, f"{loc}.content")
        out.append(msg)
    return out


def _thinking(f: Fields, body: Mapping[str, Any]) -> Thinking | None:
    raw = f.obj(body.get("thinking"), "body.thinking")
    if raw is None:
        return None
    if "type" not in raw:
        f.fail("union_tag_not_found", "body.thinking",
               "Unable to extract tag using discriminator 'type'", dict(raw),
               {"discriminator": "'type'"})
        return None
    kind = raw["type"]
    if kind not in THINKING_TYPES:
        tags = ", ".join(f"'{t}'" for t in THINKING_TYPES)
        f.fail("union_tag_invalid", "body.thinking",
               f"Input tag '{kind}' found using 'type' does not match any of the expected "
               f"tags: {tags}", dict(raw),
               {"discriminator": "'type'", "tag": str(kind), "expected_tags": tags})
        return None
    if kind != "enabled":
        return Thinking(str(kind))
    loc = "body.thinking.enabled.budget_tokens"
    raw_budget = f.missing("budget_tokens", raw, loc)
    if raw_budget is MISSING:
        return None
    budget = f.integer(raw_budget, loc, optional=False)
    if budget is not None and budget < 1024:
        f.fail("greater_than_equal", loc, "Input should be greater than or equal to 1024",
               budget, {"ge": 1024})
        return None
    return Thinking("enabled", budget)


def prompt_fits(prompt_tokens: int, max_model_len: int) -> None:
    """Raise a 400 for a prompt that leaves no room to generate in the context."""
    if prompt_tokens >= max_model_len:
        # ⚠ Chat's wording for an over-long prompt; not captured on this endpoint.
        raise ApiError(400, f"This model's maximum context length is {max_model_len} tokens. "
                            f"However, your request has {prompt_tokens} input tokens. Please "
                            "reduce the length of the input messages. (parameter=input_tokens, "
                            f"value={prompt_tokens})", "BadRequestError", "input_tokens")


@dataclass(frozen=True, slots=True)
class MessagesRequest:
    """A ``/v1/messages`` body that passed the pydantic checks."""

    model: str
    messages: list[Mapping[str, Any]]
    max_tokens: int
    stream: bool
    thinking: Thinking | None
    system: object
    chat_template_kwargs: Mapping[str, Any] | None
    effort: str | None


def check_messages(body: object, *, count_tokens: bool = False) -> MessagesRequest:
    """Run the pydantic checks of ``AnthropicMessagesRequest`` (or of the count-tokens
    request, which has no ``max_tokens`` or ``stream``); raises :class:`BodyValidationError`."""
    data = body_mapping(body)
    f = Fields(data)
    model = _model_name(f, data)
    messages = _messages(f, data)
    max_tokens = 0
    if not count_tokens:
        raw = f.missing("max_tokens", data, "body.max_tokens")
        if raw is not MISSING:
            value = f.integer(raw, "body.max_tokens", optional=False)
            if value is not None and value <= 0:
                f.fail("value_error", "body.max_tokens",
                       "Value error, max_tokens must be positive", value,
                       {"error": ValueError("max_tokens must be positive")})
            max_tokens = value or 0
        f.mapping(data.get("metadata"), "body.metadata")
    output_config = f.obj(data.get("output_config"), "body.output_config")
    effort = output_config.get("effort") if output_config else None
    thinking = _thinking(f, data)
    stream = False
    if not count_tokens:
        stream = f.boolean(data.get("stream"), "body.stream", default=False)
    f.text_or_list(data.get("system"), "body.system")
    if not count_tokens:
        f.number(data.get("temperature"), "body.temperature")
        f.integer(data.get("top_k"), "body.top_k", optional=True)
        f.number(data.get("top_p"), "body.top_p")
    kwargs = f.mapping(data.get("chat_template_kwargs"), "body.chat_template_kwargs")
    f.raise_if_any()
    if (not count_tokens and thinking is not None and thinking.budget_tokens is not None
            and thinking.budget_tokens >= max_tokens):
        f.fail("value_error", "body",
               "Value error, thinking.budget_tokens must be less than max_tokens", dict(data),
               {"error": ValueError("thinking.budget_tokens must be less than max_tokens")})
        f.raise_if_any()
    assert model is not None
    return MessagesRequest(model, messages, max_tokens, stream, thinking, data.get("system"),
                           kwargs, effort if isinstance(effort, str) else None)


def _block_text(content: object) -> str:
    """The visible text of an Anthropic ``content``: a string or its text blocks."""
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content
                       if isinstance(b, Mapping) and b.get("type") == "text")
    return message_text(content)


def messages_chat(req: MessagesRequest) -> list[dict[str, str]]:
    """The request as chat messages: ``system`` first, then each turn's text (thinking and
    tool blocks of earlier turns are not rendered, as Qwen3's template drops them)."""
    chat: list[dict[str, str]] = []
    system = _block_text(req.system) if req.system is not None else ""
    system += "".join(_block_text(m.get("content")) for m in req.messages
                      if m.get("role") == "system")
    if system:
        chat.append({"role": "system", "content": system})
    chat += [{"role": str(m.get("role")), "content": _block_text(m.get("content"))}
             for m in req.messages if m.get("role") != "system"]
    return chat


def messages_thinking(req: MessagesRequest, dialect: str) -> tuple[bool, int | None]:
    """Whether thinking is on for this request on ``dialect``, and its token budget."""
    switch = SWITCHES[dialect]
    effort = req.effort
    budget = None
    if req.thinking is not None:
        if req.thinking.kind == "disabled" and switch.messages_disabled_off:
            effort = "none"
        elif req.thinking.kind == "enabled" and switch.messages_budget:
            budget = req.thinking.budget_tokens
    return thinking_on(switch, req.chat_template_kwargs, effort), budget


def messages_prompt(req: MessagesRequest, dialect: str) -> str:
    """The rendered prompt (what ``count_tokens`` counts)."""
    thinking, _ = messages_thinking(req, dialect)
    return render_chat(messages_chat(req), add_generation_prompt=True,
                       continue_final_message=False, thinking=thinking)


def parse_messages(body: object, *, dialect: str, known: tuple[str, ...],
                   max_model_len: int) -> Job:
    """Validate a ``/v1/messages`` body into a :class:`Job` (raises
    :class:`BodyValidationError` or :class:`ApiError`). ``max_tokens`` above
    ``max_model_len`` is refused; otherwise it is clamped to the context left."""
    req = check_messages(body)
    known_model(req.model, known)
    if req.max_tokens > max_model_len:
        raise ApiError(400, f"max_completion_tokens={req.max_tokens} cannot be greater than "
                            f"max_model_len={max_model_len}. Please request fewer output "
                            f"tokens. (parameter=max_completion_tokens, value={req.max_tokens})",
                       "BadRequestError", "max_completion_tokens")
    thinking, budget = messages_thinking(req, dialect)
    prompt = messages_prompt(req, dialect)
    prompt_tokens = len(tokenize(prompt))
    prompt_fits(prompt_tokens, max_model_len)
    max_tokens = min(req.max_tokens, max_model_len - prompt_tokens)
    mode = Mode.THINK if thinking else Mode.NO_THINK
    return Job(endpoint="messages", model=req.model, stream=req.stream, n=1,
               include_usage=True, continuous_usage=False, prompt=prompt,
               prompt_tokens=prompt_tokens,
               spec=GenSpec(max_tokens, mode, budget, None, stream=req.stream),
               thinking=thinking, request_id=None)


def count_tokens(body: object, *, dialect: str, known: tuple[str, ...]) -> int:
    """The prompt length ``/v1/messages/count_tokens`` reports (raises like
    :func:`parse_messages`; the model must exist)."""
    req = check_messages(body, count_tokens=True)
    known_model(req.model, known)
    return len(tokenize(messages_prompt(req, dialect)))
