"""Each closed vocabulary (``Literal`` type) of the sidecar is declared once."""

from __future__ import annotations

import ast
import importlib
import typing
from pathlib import Path

import sidecar

PACKAGE = Path(sidecar.__file__).parent


def literal_declarations() -> list[tuple[str, str, frozenset[object]]]:
    """(module, name, values) of every module-level ``Name = Literal[...]`` in the sidecar
    (the simulated node, which imitates other servers, is not part of it)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "simulator" in path.parts:
            continue
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            target = node.targets[0] if isinstance(node, ast.Assign) else None
            if (isinstance(target, ast.Name) and isinstance(node.value, ast.Subscript)
                    and ast.unparse(node.value.value) in ("Literal", "typing.Literal")):
                value = getattr(importlib.import_module(module), target.id)
                found.append((module, target.id, frozenset(typing.get_args(value))))
    return found


def test_every_literal_type_is_declared_once() -> None:
    """No two modules declare a Literal type of the same name, or of the same values: a
    vocabulary shared by config, metrics and the core lives in ``sidecar.labels``."""
    found = literal_declarations()
    assert len(found) > 10
    names = [name for _module, name, _values in found]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    values = [v for _module, _name, v in found]
    same = [(m, n) for m, n, v in found if values.count(v) > 1]
    assert not same, same
