"""The simulator's pure modules (engine, common pieces, every API's request and wire
modules) import neither the network stack nor the clock nor a source of randomness."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SIMULATOR = Path(__file__).parents[2] / "sidecar" / "simulator"
PURE = (
    "engine/behaviours", "engine/generation", "engine/tokenizer", "engine/faults",
    "engine/job", "common/validation", "common/thinking", "common/errors", "common/sse",
    "common/draw", "common/gojson", "common/openai_request", "common/openai_wire",
    "chat/request", "chat/vllm", "chat/servers", "completions/request", "completions/vllm",
    "completions/servers", "messages/request", "messages/stream", "messages/vllm",
    "messages/servers", "responses/request", "responses/stream", "responses/vllm",
    "responses/servers", "ollama/request", "ollama/lines",
)
# The behaviours seed their own generators (the paraphrase loop), reproducibly.
SEEDED = {"engine/behaviours"}


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_do_no_io(module: str) -> None:
    """Validation and encoders import neither aiohttp nor asyncio nor the clock."""
    tree = ast.parse((SIMULATOR / f"{module}.py").read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom)}
    forbidden = {"aiohttp", "asyncio", "time", "socket", "random"}
    if module in SEEDED:
        forbidden.discard("random")
    assert not imported & forbidden


def test_every_module_is_listed_or_does_io() -> None:
    """A new module in an API folder, the engine or the common pieces is listed above,
    unless it is one that serves requests (``routes``)."""
    found = {str(p.relative_to(SIMULATOR).with_suffix("")) for p in SIMULATOR.glob("*/*.py")
             if p.name != "__init__.py"}
    does_io = {m for m in found if m.startswith("node/") or m.endswith("/routes")}
    assert found - does_io == set(PURE)
