"""Request validation for the coding-agent APIs of the simulated node: Anthropic
``/v1/messages`` (and ``count_tokens``) and OpenAI ``/v1/responses``. Pure: JSON body in,
a :class:`Job` (plus what the answer echoes) or an error out.

Two kinds of error, as on vLLM 0.32:

- :class:`BodyValidationError`: what vLLM's pydantic request models reject, answered by
  its global handler with an OpenAI-shaped 400 (``"type": "Bad Request"``, ``param`` the
  first error's location), on ``/v1/messages`` too. The checks below mirror those models
  field by field, in their field order, with pydantic's lax coercions (``"12"`` is an int,
  ``"yes"`` a bool). Verified: every message text against vLLM 0.32.0's own models and
  handler (``tests/data/captures/vllm-0.32.0-agent-apis/rebuilt_errors.json``, whose two
  server-captured cases are byte-identical); ⚠ deep checks of content blocks, tools and
  ``input`` items are not modelled (those bodies are accepted).
- :class:`~sidecar.simulator.requests.ApiError`: what the handlers return (unknown model,
  limits, ``background``), Anthropic-shaped on ``/v1/messages``.

Thinking switches per server (:data:`SWITCHES`): vLLM maps messages'
``thinking: {"type": "disabled"}`` to ``reasoning_effort: "none"`` (what its probe picks
for a Qwen3 template) and ``{"type": "enabled", "budget_tokens": N}`` to
``thinking_token_budget``; Responses' ``reasoning.effort: "none"`` turns thinking off;
``chat_template_kwargs.enable_thinking`` wins over both. llama.cpp ignores
``thinking.disabled`` (captured); Ollama maps ``thinking``/``effort`` to ``think`` and
ignores ``chat_template_kwargs`` (source-read); SGLang honours ``thinking.disabled``
(documented only).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sidecar.simulator.generation import GenSpec, Mode
from sidecar.simulator.requests import ApiError, Job, thinking_enabled
from sidecar.simulator.tokenizer import message_text, render_chat, tokenize

_MAX_INPUT_CHARS = 200  # vLLM's handler shortens each echoed input to this
_MAX_REPORTED = 10
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})
ROLES = ("user", "assistant", "system")
THINKING_TYPES = ("enabled", "disabled", "adaptive")
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
OLLAMA_EFFORTS = ("none", "low", "medium", "high", "max")
_MISSING = object()


@dataclass(frozen=True, slots=True)
class FieldError:
    """One pydantic error: its type, dotted location, message, offending input, context."""

    type: str
    loc: str
    msg: str
    input: object
    ctx: dict[str, object] | None = None

    def render(self) -> str:
        """The error as vLLM's handler prints it (a Python ``dict`` repr)."""
        shown: dict[str, object] = {
            "type": self.type, "loc": self.loc, "msg": self.msg, "input": _summary(self.input)}
        if self.ctx is not None:
            shown["ctx"] = self.ctx
        return repr(shown)


class BodyValidationError(Exception):
    """The body failed vLLM's pydantic request model (answered OpenAI-shaped, 400)."""

    def __init__(self, errors: Sequence[FieldError]) -> None:
        super().__init__(errors[0].msg)
        self.errors = tuple(errors)

    @property
    def param(self) -> str:
        return self.errors[0].loc

    @property
    def message(self) -> str:
        count = len(self.errors)
        label = "error" if count == 1 else "errors"
        lines = [f"{count} validation {label}:"]
        lines += [f"  {e.render()}" for e in self.errors[:_MAX_REPORTED]]
        if count > _MAX_REPORTED:
            lines.append(f"  ...and {count - _MAX_REPORTED} more {label}")
        return "\n".join(lines)


def _summary(value: object) -> object:
    """The ``input`` as vLLM's handler shows it: containers described, the rest as text."""
    if isinstance(value, (list, dict)):
        return f"<{type(value).__name__} of {len(value)} items>"
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= _MAX_INPUT_CHARS else text[:_MAX_INPUT_CHARS] + "...[truncated]"


class _Fields:
    """Collects pydantic-style errors while reading a body; returns coerced values."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        self.body = body
        self.errors: list[FieldError] = []

    def fail(self, kind: str, loc: str, msg: str, value: object,
             ctx: dict[str, object] | None = None) -> None:
        self.errors.append(FieldError(kind, loc, msg, value, ctx))

    def missing(self, name: str, parent: Mapping[str, Any], loc: str) -> object:
        if name not in parent:
            self.fail("missing", loc, "Field required", dict(parent))
            return _MISSING
        return parent[name]

    def string(self, value: object, loc: str, *, optional: bool) -> str | None:
        if value is None and optional:
            return None
        if isinstance(value, str):
            return value
        self.fail("string_type", loc, "Input should be a valid string", value)
        return None

    def integer(self, value: object, loc: str, *, optional: bool) -> int | None:
        if value is None and optional:
            return None
        if isinstance(value, int):  # bool included: pydantic's lax mode takes it
            return int(value)
        if isinstance(value, float):
            if value.is_integer():
                return int(value)
            self.fail("int_from_float", loc,
                      "Input should be a valid integer, got a number with a fractional part",
                      value)
            return None
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                self.fail("int_parsing", loc,
                          "Input should be a valid integer, unable to parse string as an "
                          "integer", value)
                return None
        self.fail("int_type", loc, "Input should be a valid integer", value)
        return None

    def number(self, value: object, loc: str) -> float | None:
        if value is None:
            return None
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                self.fail("float_parsing", loc,
                          "Input should be a valid number, unable to parse string as a number",
                          value)
                return None
        self.fail("float_type", loc, "Input should be a valid number", value)
        return None

    def boolean(self, value: object, loc: str, *, default: bool) -> bool:
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float)) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        if isinstance(value, (int, float, str)):
            self.fail("bool_parsing", loc,
                      "Input should be a valid boolean, unable to interpret input", value)
        else:
            self.fail("bool_type", loc, "Input should be a valid boolean", value)
        return default

    def obj(self, value: object, loc: str) -> Mapping[str, Any] | None:
        """A nested pydantic model (``None`` allowed)."""
        if value is None:
            return None
        if isinstance(value, Mapping):
            return value
        self.fail("model_attributes_type", loc,
                  "Input should be a valid dictionary or object to extract fields from", value)
        return None

    def mapping(self, value: object, loc: str) -> Mapping[str, Any] | None:
        """A plain ``dict[str, Any]`` field (``None`` allowed)."""
        if value is None:
            return None
        if isinstance(value, Mapping):
            return value
        self.fail("dict_type", loc, "Input should be a valid dictionary", value)
        return None

    def text_or_list(self, value: object, loc: str) -> None:
        """A ``str | list[...]`` union (``None`` allowed): both branches report."""
        if value is None or isinstance(value, (str, list)):
            return
        self.fail("string_type", loc, "Input should be a valid string", value)
        self.fail("list_type", loc, "Input should be a valid list", value)

    def literal(self, value: object, loc: str, allowed: Sequence[str]) -> str | None:
        if isinstance(value, str) and value in allowed:
            return value
        quoted = [f"'{a}'" for a in allowed]
        expected = ", ".join(quoted[:-1]) + f" or {quoted[-1]}"
        self.fail("literal_error", loc, f"Input should be {expected}", value,
                  {"expected": expected})
        return None

    def raise_if_any(self) -> None:
        if self.errors:
            raise BodyValidationError(self.errors)


def _body(body: object) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise BodyValidationError([FieldError(
            "model_attributes_type", "body",
            "Input should be a valid dictionary or object to extract fields from", body)])
    return body


# --------------------------------------------------------------------------- messages


@dataclass(frozen=True, slots=True)
class Thinking:
    """A validated ``thinking`` config: ``kind`` and, when enabled, its budget."""

    kind: str
    budget_tokens: int | None = None


def _model_name(f: _Fields, body: Mapping[str, Any]) -> str | None:
    raw = f.missing("model", body, "body.model")
    if raw is _MISSING:
        return None
    model = f.string(raw, "body.model", optional=False)
    if model == "":
        f.fail("value_error", "body.model", "Value error, Model is required", model,
               {"error": ValueError("Model is required")})
    return model


def _messages(f: _Fields, body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    raw = f.missing("messages", body, "body.messages")
    if raw is _MISSING:
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
        if role is not _MISSING:
            f.literal(role, f"{loc}.role", ROLES)
        content = f.missing("content", msg, f"{loc}.content")
        if content is not _MISSING:
            if content is None:
                f.fail("string_type", f"{loc}.content", "Input should be a valid string", None)
                f.fail("list_type", f"{loc}.content", "Input should be a valid list", None)
            else:
                f.text_or_list(content, f"{loc}.content")
        out.append(msg)
    return out


def _thinking(f: _Fields, body: Mapping[str, Any]) -> Thinking | None:
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
    if raw_budget is _MISSING:
        return None
    budget = f.integer(raw_budget, loc, optional=False)
    if budget is not None and budget < 1024:
        f.fail("greater_than_equal", loc, "Input should be greater than or equal to 1024",
               budget, {"ge": 1024})
        return None
    return Thinking("enabled", budget)


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
    data = _body(body)
    f = _Fields(data)
    model = _model_name(f, data)
    messages = _messages(f, data)
    max_tokens = 0
    if not count_tokens:
        raw = f.missing("max_tokens", data, "body.max_tokens")
        if raw is not _MISSING:
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


@dataclass(frozen=True, slots=True)
class Switches:
    """How one server turns thinking off on the agent APIs (see the module docstring)."""

    messages_disabled_off: bool  # thinking: {"type": "disabled"} turns thinking off
    messages_budget: bool  # thinking.enabled.budget_tokens becomes a thinking budget
    honours_template_kwargs: bool  # chat_template_kwargs.enable_thinking is read
    effort_none_off: bool  # Responses' reasoning.effort "none" turns thinking off


SWITCHES: Mapping[str, Switches] = {
    "vllm": Switches(True, True, True, True),
    # Captured: thinking.disabled leaves thinking on; chat_template_kwargs and effort "none"
    # turn it off. ⚠ budget_tokens: not captured, treated as ignored.
    "llamacpp": Switches(False, False, True, True),
    # ⚠ Documented only (request_conversion.py, commit bef8e238): disabled turns it off,
    # budget_tokens is accepted but not enforced.
    "sglang": Switches(True, False, True, True),
    # ⚠ Source-read (anthropic.go, responses.go at 017eb8ae): think=false; no kwargs.
    "ollama": Switches(True, False, False, True),
}


def _thinking_on(switch: Switches, kwargs: Mapping[str, Any] | None,
                 effort: str | None) -> bool:
    chat_like: dict[str, Any] = {}
    if switch.honours_template_kwargs and kwargs is not None:
        chat_like["chat_template_kwargs"] = dict(kwargs)
    if effort is not None:
        chat_like["reasoning_effort"] = effort
    return thinking_enabled(chat_like)


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
    return _thinking_on(switch, req.chat_template_kwargs, effort), budget


def messages_prompt(req: MessagesRequest, dialect: str) -> str:
    """The rendered prompt (what ``count_tokens`` counts)."""
    thinking, _ = messages_thinking(req, dialect)
    return render_chat(messages_chat(req), add_generation_prompt=True,
                       continue_final_message=False, thinking=thinking)


def _known_model(model: str, known: tuple[str, ...]) -> None:
    if model not in known:
        raise ApiError(404, f"The model `{model}` does not exist. "
                            f"Valid aliases: {', '.join(known)}.", "NotFoundError", "model")


def _prompt_fits(prompt_tokens: int, max_model_len: int) -> None:
    if prompt_tokens >= max_model_len:
        # ⚠ Chat's wording for an over-long prompt; not captured on this endpoint.
        raise ApiError(400, f"This model's maximum context length is {max_model_len} tokens. "
                            f"However, your request has {prompt_tokens} input tokens. Please "
                            "reduce the length of the input messages. (parameter=input_tokens, "
                            f"value={prompt_tokens})", "BadRequestError", "input_tokens")


def parse_messages(body: object, *, dialect: str, known: tuple[str, ...],
                   max_model_len: int) -> Job:
    """Validate a ``/v1/messages`` body into a :class:`Job` (raises
    :class:`BodyValidationError` or :class:`ApiError`). ``max_tokens`` above
    ``max_model_len`` is refused; otherwise it is clamped to the context left."""
    req = check_messages(body)
    _known_model(req.model, known)
    if req.max_tokens > max_model_len:
        raise ApiError(400, f"max_completion_tokens={req.max_tokens} cannot be greater than "
                            f"max_model_len={max_model_len}. Please request fewer output "
                            f"tokens. (parameter=max_completion_tokens, value={req.max_tokens})",
                       "BadRequestError", "max_completion_tokens")
    thinking, budget = messages_thinking(req, dialect)
    prompt = messages_prompt(req, dialect)
    prompt_tokens = len(tokenize(prompt))
    _prompt_fits(prompt_tokens, max_model_len)
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
    _known_model(req.model, known)
    return len(tokenize(messages_prompt(req, dialect)))


# -------------------------------------------------------------------------- responses


@dataclass(frozen=True, slots=True)
class ResponsesJob:
    """A validated ``/v1/responses`` request: the generation :class:`Job`, the response id,
    and the request fields the response object echoes (in vLLM's field order)."""

    job: Job
    response_id: str | None
    echo: dict[str, Any] = field(default_factory=dict)
    include_reasoning: bool = True


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


def _check_responses(body: object, dialect: str) -> tuple[Mapping[str, Any], _Fields]:
    data = _body(body)
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
    f = _Fields(data)
    f.boolean(data.get("background"), "body.background", default=False)
    raw_input = f.missing("input", data, "body.input")
    if raw_input is not _MISSING:
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
    _known_model(str(model), known)
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
    thinking = _thinking_on(switch, data.get("chat_template_kwargs"),
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


def _responses_echo(data: Mapping[str, Any], f: _Fields, model: str,
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


def not_found(response_id: str) -> ApiError:
    """vLLM's answer for a response id it does not hold (always, without the store)."""
    return ApiError(404, f"Response with id '{response_id}' not found.",
                    "invalid_request_error", "response_id")
