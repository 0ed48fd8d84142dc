"""Typed values from TOML tables, environment strings and flag strings: the generic part
of the config loader (:func:`build` a dataclass from a raw table, :func:`coerce` one value
to its annotated type). Every error is a :class:`~sidecar.errors.ConfigError` naming the
dotted key."""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

from sidecar.errors import ConfigError


def is_scalar(tp: Any) -> bool:
    if dataclasses.is_dataclass(tp):
        return False
    args = typing.get_args(tp)
    if typing.get_origin(tp) is tuple:
        return args[0] is str
    return all(is_scalar(a) for a in args) if args and is_union(tp) else True


def is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def build(cls: Any, raw: Any, prefix: str) -> Any:
    where = prefix.rstrip(".") or "config"
    if not isinstance(raw, Mapping):
        raise ConfigError(f"key '{where}': expected a table")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - names)
    if unknown:
        raise ConfigError(f"unknown key '{prefix}{unknown[0]}'")
    kwargs = {name: coerce(hints[name], value, f"{prefix}{name}") for name, value in raw.items()}
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required field of a table entry is missing
        missing = re.search(r"'(\w+)'", str(exc))
        name = missing.group(1) if missing else "?"
        raise ConfigError(f"key '{prefix}{name}': required") from None
    except ValueError as exc:  # the table's own checks (``LoopConfig``)
        raise ConfigError(f"key '{where}': {exc}") from None


def coerce(tp: Any, value: Any, key: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if is_union(tp):
        if type(None) in args and (
            value is None or (isinstance(value, str) and value.lower() == "none")
        ):
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(arg, value, key)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"key '{key}': invalid value {value!r}")
    if dataclasses.is_dataclass(tp):
        return build(tp, value, f"{key}.")
    if origin is Literal:
        if value not in args:
            choices = ", ".join(str(a) for a in args)
            raise ConfigError(f"key '{key}': expected one of {choices}, got {value!r}")
        return value
    if origin is tuple:
        item = args[0]
        if isinstance(value, str) and item is str:
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list):
            raise ConfigError(f"key '{key}': expected a list, got {type(value).__name__}")
        return tuple(coerce(item, v, f"{key}[{i}]") for i, v in enumerate(value))
    if tp is Mapping[str, Any] or origin is Mapping:
        if not isinstance(value, Mapping):
            raise ConfigError(f"key '{key}': expected a table, got {type(value).__name__}")
        return dict(value)
    return scalar(tp, value, key)


def scalar(tp: Any, value: Any, key: str) -> Any:
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on"):
            return True
        if isinstance(value, str) and value.lower() in ("false", "0", "no", "off"):
            return False
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            return int(value)
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is str:
        if isinstance(value, str):
            return value
    else:
        raise ConfigError(f"key '{key}': unsupported option type {tp!r}")
    raise ConfigError(f"key '{key}': expected {tp.__name__}, got {value!r}")
