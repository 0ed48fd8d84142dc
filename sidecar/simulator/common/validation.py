"""vLLM's request-model (pydantic) checks, as the simulated node applies them to the
agent APIs' bodies. Pure.

What vLLM's pydantic models reject is answered by its global handler with an OpenAI-shaped
400 (``"type": "Bad Request"``, ``param`` the first error's dotted location), on
``/v1/messages`` too: ``"N validation error(s):"`` then one Python ``dict`` repr per error
(its ``input`` shortened: containers described, the rest as text). :class:`Fields` reads
fields with pydantic's lax coercions (``"12"`` is an int, ``"yes"`` a bool, ``True`` an
int) and collects the errors in the order the models report them.

Verified: the message texts against vLLM 0.32.0's own models and handler
(``tests/data/captures/vllm-0.32.0-agent-apis/rebuilt_errors.json``; its two cases also
captured from a real server are byte-identical). ⚠ Deep checks of content blocks, tools
and ``input`` items are not modelled: such bodies are accepted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_MAX_INPUT_CHARS = 200  # vLLM's handler shortens each echoed input to this
_MAX_REPORTED = 10
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})
MISSING = object()  # a field absent from the body


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


class Fields:
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
            return MISSING
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


def body_mapping(body: object) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise BodyValidationError([FieldError(
            "model_attributes_type", "body",
            "Input should be a valid dictionary or object to extract fields from", body)])
    return body
