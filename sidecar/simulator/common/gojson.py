"""JSON as Go's ``encoding/json`` writes it, for the Ollama dialect. Pure.

Differences from :func:`orjson.dumps` that show on the wire: map keys are sorted (Go
marshals a ``map[string]any`` in key order; structs keep their field order, so callers
sort only what Go holds as a map), ``<``, ``>``, ``&``, U+2028 and U+2029 are escaped as
``\\u003c`` … (``SetEscapeHTML`` is on by default), and a whole float prints without a
fraction (``1.0`` → ``1``). ``json.Encoder.Encode`` adds a newline; :func:`encode` does too.
"""

from __future__ import annotations

from typing import Any

import orjson

_ESCAPES = (
    (b"<", b"\\u003c"),
    (b">", b"\\u003e"),
    (b"&", b"\\u0026"),
    ("\u2028".encode(), b"\\u2028"),
    ("\u2029".encode(), b"\\u2029"),
)


def _whole_floats(obj: Any) -> Any:
    if isinstance(obj, float) and obj.is_integer():
        return int(obj)
    if isinstance(obj, dict):
        return {k: _whole_floats(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_whole_floats(v) for v in obj]
    return obj


def marshal(obj: Any, *, sort_keys: bool = False) -> bytes:
    """``json.Marshal``: compact; ``sort_keys`` for values Go holds as maps."""
    data = orjson.dumps(_whole_floats(obj), option=orjson.OPT_SORT_KEYS if sort_keys else 0)
    for raw, escaped in _ESCAPES:
        if raw in data:
            data = data.replace(raw, escaped)
    return data


def encode(obj: Any, *, sort_keys: bool = False) -> bytes:
    """``json.NewEncoder(w).Encode``: :func:`marshal` plus a trailing newline."""
    return marshal(obj, sort_keys=sort_keys) + b"\n"
